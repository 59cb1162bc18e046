//! Review of hybrid sharding (`--dp-replicas`, Megatron-Core's
//! `--num-distributed-optimizer-instances`) against Megatron-LM's own code (tenth review round).

mod common;
use common::*;

use serde_json::Value;
use tpsim::cluster::{Cluster, LinkSpeed};
use tpsim::cost::comm::{Collective, dp_traffic, grad_bucket_params};
use tpsim::plan::{ParallelPlan, PlanRequest};
use tpsim::specs::{load_gpu, load_model};
use tpsim::training::{AttentionKernel, Training, TrainingFramework};
use tpsim::units::{BytesPerSec, Seconds};

/// Megatron-LM sizes a gradient bucket by the whole dp-cp group whatever the number of
/// distributed-optimizer instances (megatron/training/training.py `resolve_ddp_bucket_size`:
/// max(40M, 1M·dp_cp)); only the reduce-scatter of each bucket stays within an instance. With 16
/// copies of 8 ranks on 128 GPUs the exposed last bucket is a 128M-parameter bucket
/// reduce-scattered over 8 ranks and its shard all-reduced over 16 copies; it was sized by the 8
/// ranks of a copy (40M).
#[test]
fn the_last_bucket_is_sized_by_the_whole_data_parallel_group() {
    let model = load_model("llama3-8b").unwrap();
    let cluster = Cluster {
        gpu: load_gpu("h100-sxm-80g").unwrap(),
        nodes: 16,
        gpus_per_node: 8,
    };
    let training = Training::with_framework(
        TrainingFramework::MegatronCore,
        8192,
        1024,
        AttentionKernel::Flash,
    );
    let request = PlanRequest {
        dp: 128,
        zero: 1,
        dp_replicas: 16,
        ..PlanRequest::default()
    };
    let plan = ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
    let link = |gb_per_s: f64| LinkSpeed {
        bandwidth: BytesPerSec(gb_per_s * 1e9),
        latency: Seconds(5e-6),
    };
    let (nvlink, network) = (link(400.0), link(45.0));
    let params = 8e9;
    let traffic = dp_traffic(&training, &plan, params, 8, nvlink, 16, network, 2.0);
    let grad_bytes = training.grad_dtype.bytes();
    let bucket = grad_bucket_params(128) * grad_bytes;
    assert_eq!(grad_bucket_params(128), 128e6);
    let want = Collective::ReduceScatter.time(bucket, 8, nvlink)
        + Collective::AllReduce.time(bucket / 8.0, 16, network);
    assert!(
        (traffic.last_bucket_s - want).abs() <= 1e-12 * want,
        "last bucket {} s, want {want} s (a 128M-parameter bucket)",
        traffic.last_bucket_s
    );
    // One copy (every rank sharding the same states): the same bucket, as before the copies.
    let one = dp_traffic(&training, &plan, params, 128, network, 1, network, 2.0);
    let want_one = Collective::ReduceScatter.time(bucket, 128, network);
    assert!((one.last_bucket_s - want_one).abs() <= 1e-12 * want_one);
}

/// `eval --format json` of Mixtral 8x7B on 4 nodes, EP 8, ZeRO-1 with `replicas` copies.
fn mixtral_ep8(replicas: &str) -> Value {
    json(&[
        "eval",
        "--model",
        "mixtral-8x7b",
        "--nodes",
        "4",
        "--tp",
        "1",
        "--ep",
        "8",
        "--global-batch",
        "256",
        "--zero",
        "1",
        "--dp-replicas",
        replicas,
        "--format",
        "json",
    ])["plans"][0]
        .clone()
}

/// The copy per NVLink domain that the search offers, with experts over the GPUs of a node (EP 8,
/// one copy of 8 ranks per node on 32 GPUs): the experts' data-parallel ranks (32 / 8 = 4) split
/// into 4 copies of one rank each. Megatron-Core asserts only that the copies divide the expert
/// data-parallel size (parallel_state.py: `expert_data_parallel_size %
/// num_distributed_optimizer_instances == 0`) and runs it: each rank keeps its experts' optimizer
/// states whole and all-reduces their gradients across the copies, the dense states stay sharded
/// over the 8 ranks of a node. tpsim refused it as "plain data parallelism, --zero 0".
#[test]
fn expert_copies_of_one_rank_are_priced_as_megatron_core_runs_them() {
    let two = mixtral_ep8("2");
    let four = mixtral_ep8("4");
    assert_eq!(four["dp_replicas"], 4, "{four}");
    // Expert optimizer states: sharded over 2 ranks with 2 copies, whole with 4; the dense ones
    // over 16 and 8 ranks. More copies, more optimizer bytes.
    let opt = |v: &Value| v["memory"]["optimizer_bytes"].as_f64().unwrap();
    assert!(
        opt(&four) > 1.5 * opt(&two),
        "{} vs {}",
        opt(&four),
        opt(&two)
    );
    // The ledger lists the experts' all-reduce across the 4 copies at the whole expert gradients'
    // size, and no expert reduce-scatter within a one-rank copy.
    let ledger = four["ledger"].to_string();
    assert!(
        ledger.contains("each reduced expert gradient shard across the copies"),
        "{ledger}"
    );
    assert!(
        !ledger.contains("expert gradients to their owning shard"),
        "{ledger}"
    );
}

/// Megatron-LM's torch FSDP2 shards over the whole dp-cp group
/// (torch_fully_sharded_data_parallel.py builds its mesh from `get_data_parallel_group(
/// with_context_parallel=True)`); `--num-distributed-optimizer-instances` changes nothing there,
/// so a pasted line is priced as one copy and says so, where it was priced as hybrid sharding.
#[test]
fn torch_fsdp2_lines_ignore_the_instances_as_megatron_does() {
    const LINE: &str = "--num-layers 4 --hidden-size 1024 --num-attention-heads 8 --ffn-hidden-size 4096 --seq-length 1024 --max-position-embeddings 1024 --micro-batch-size 1 --global-batch-size 16 --untie-embeddings-and-output-weights --no-gradient-accumulation-fusion --use-torch-fsdp2 --bf16";
    let eval = |extra: &str| {
        run(&[
            "eval",
            "--nodes",
            "1",
            "--megatron-args",
            &format!("{LINE}{extra}"),
            "--format",
            "json",
        ])
    };
    let with = eval(" --num-distributed-optimizer-instances 2");
    let without = eval("");
    assert_eq!(with.code, 0, "{}", with.stderr);
    let plan = |r: &Run| serde_json::from_str::<Value>(&r.stdout).unwrap()["plans"][0].clone();
    assert_eq!(plan(&with)["dp_replicas"], 1, "{}", with.stdout);
    assert_eq!(plan(&with)["time"], plan(&without)["time"]);
    assert!(
        with.stderr
            .contains("--num-distributed-optimizer-instances 2 is ignored under --use-torch-fsdp2"),
        "{}",
        with.stderr
    );
}
