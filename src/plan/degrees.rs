//! The parallel degrees against the cluster and the model: their product, the data-parallel
//! replicas of the sharded states, the heads TP splits, and TP's place inside an NVLink domain.

use crate::cluster::Cluster;
use crate::model::Model;
use crate::training::Training;

use super::error::PlanError;
use super::experts::megatron_core_refuses_biased_expert_tp;
use super::request::PlanRequest;
use super::valid::{divisors, list};

/// Several copies of the sharded states (`PlanRequest::dp_replicas`) where the framework keeps
/// them at this ZeRO stage, and, for an MoE model, as many copies of the experts' states, which
/// must split the expert data-parallel ranks too.
pub(super) fn check_dp_replicas(
    r: &PlanRequest,
    model: &Model,
    training: &Training,
) -> Result<(), PlanError> {
    if r.dp_replicas <= 1 {
        return Ok(());
    }
    if let Some((rule, fix)) = training.framework.dp_replicas_refusal(r.zero) {
        return Err(PlanError::DpReplicasFramework {
            replicas: r.dp_replicas,
            framework: training.framework.as_str(),
            rule,
            fix,
        });
    }
    // Megatron-Core's rule; torchtitan's HSDP replicates the experts' mesh (`dp_replicate` x
    // efsdp x ep) over the same copies as the dense one, so its copies always divide the expert
    // data-parallel ranks once ep divides dp_shard x cp x tp, which `framework_expert_error`
    // checks in torchtitan's words.
    if model.moe.is_some() && training.framework == crate::training::TrainingFramework::MegatronCore
    {
        let stage_gpus = u64::from(r.tp) * u64::from(r.cp) * u64::from(r.dp);
        let expert_group = u64::from(r.ep) * u64::from(r.etp);
        if expert_group > 0 && stage_gpus.is_multiple_of(expert_group) {
            let expert_dp = (stage_gpus / expert_group) as u32;
            // A copy of the experts' states may sit on one rank (expert DP = copies, as with ep =
            // the GPUs of a node and one copy per node): Megatron-Core asserts only the division,
            // and that copy's experts are then all-reduced whole across the copies while the
            // dense states stay sharded.
            if !expert_dp.is_multiple_of(r.dp_replicas) {
                return Err(PlanError::DpReplicasExpertDp {
                    replicas: r.dp_replicas,
                    expert_dp,
                    valid: list(divisors(
                        crate::integer::gcd(u64::from(expert_dp), u64::from(r.dp)) as u32,
                    )),
                });
            }
        }
    }
    Ok(())
}

/// The copies (divisors of `divides`) that leave each of `ranks` copies' shards 2 or more ranks,
/// listed for a fix (`1 (no copies: drop --dp-replicas)` where none does).
fn copies_of_two_or_more(divides: u32, ranks: u64) -> String {
    let valid: Vec<u32> = divisors(divides)
        .into_iter()
        .filter(|&d| d == 1 || ranks / u64::from(d) >= 2)
        .collect();
    if valid == [1] {
        "1 (no copies: drop --dp-replicas)".to_string()
    } else {
        list(valid)
    }
}

/// Every degree at least 1, a real ZeRO stage, and degrees whose product is the cluster.
pub(super) fn check_degrees(
    r: &PlanRequest,
    cluster: &Cluster,
    copies_split_cp: bool,
) -> Result<(), PlanError> {
    for (what, value) in [
        ("--tp", r.tp),
        ("--cp", r.cp),
        ("--ep", r.ep),
        ("--etp", r.etp),
        ("--pp", r.pp),
        ("--dp", r.dp),
        ("--vpp", r.vpp),
        ("--micro-batch", r.micro_batch),
    ] {
        if value == 0 {
            return Err(PlanError::ZeroDegree { what });
        }
    }
    if r.zero > 3 {
        return Err(PlanError::ZeroStage { zero: r.zero });
    }
    if !r.reshard_after_forward && r.zero < 3 {
        return Err(PlanError::ReshardWithoutZero3 { zero: r.zero });
    }
    if r.dp_replicas == 0 {
        return Err(PlanError::ZeroDegree {
            what: "--dp-replicas",
        });
    }
    if r.dp_replicas > 1 && r.zero == 0 {
        return Err(PlanError::DpReplicasWithoutZero {
            replicas: r.dp_replicas,
        });
    }
    // The copies split the data-parallel ranks, with or without the CP ranks among them
    // (`TrainingFramework::copies_split_cp`).
    let data_ranks = u64::from(r.dp) * u64::from(r.cp);
    let split = if copies_split_cp {
        data_ranks
    } else {
        u64::from(r.dp)
    };
    if !split.is_multiple_of(u64::from(r.dp_replicas)) {
        let divides = u32::try_from(split).unwrap_or(r.dp);
        return Err(PlanError::DpReplicasDp {
            replicas: r.dp_replicas,
            what: if copies_split_cp && r.cp > 1 {
                format!(
                    "the --dp {} x --cp {} = {split} data-parallel ranks (Megatron-Core splits them with their CP ranks)",
                    r.dp, r.cp
                )
            } else {
                format!("the --dp {} data-parallel ranks", r.dp)
            },
            valid: copies_of_two_or_more(divides, data_ranks),
        });
    }
    if r.dp_replicas > 1 && data_ranks / u64::from(r.dp_replicas) < 2 {
        return Err(PlanError::DpReplicasSingleRank {
            replicas: r.dp_replicas,
            what: "dp x cp",
            ranks: data_ranks,
            valid: copies_of_two_or_more(u32::try_from(split).unwrap_or(r.dp), data_ranks),
        });
    }
    let gpus = cluster.total_gpus();
    let product = u64::from(r.tp) * u64::from(r.cp) * u64::from(r.pp) * u64::from(r.dp);
    if product != u64::from(gpus) {
        let tp_pp = u64::from(r.tp) * u64::from(r.cp) * u64::from(r.pp);
        let suggest_dp = if u64::from(gpus) % tp_pp == 0 {
            format!("e.g. --dp {}", u64::from(gpus) / tp_pp)
        } else {
            format!(
                "no --dp works: {gpus} is not a multiple of tp x cp x pp = {tp_pp}; change --tp, --cp or --pp"
            )
        };
        return Err(PlanError::GpuCount {
            tp: r.tp,
            cp: r.cp,
            pp: r.pp,
            dp: r.dp,
            product,
            gpus,
            suggest_dp,
        });
    }
    Ok(())
}

/// The expert-TP degrees the rest of `r` accepts, for an `--etp` that does not divide the expert
/// MLP width: dividing it, within a node, folding with `--ep` into the tp x cp x dp GPUs of a
/// stage (`EpFolding`), and 1 alone where DeepEP runs over experts (`DeepepWithExpertTp`) or
/// Megatron-Core runs biased experts (`BiasedExpertsWithExpertTp`). None at all when `--ep` itself
/// does not fold, which is then what to change.
fn valid_etp(r: &PlanRequest, model: &Model, cluster: &Cluster, training: &Training) -> String {
    let expert_ffn = model.moe.map_or(model.ffn_hidden, |moe| moe.ffn_hidden);
    let stage_gpus = u64::from(r.tp) * u64::from(r.cp) * u64::from(r.dp);
    let unsplit_only = (r.ep > 1
        && training.moe_dispatch.dispatcher == crate::training::MoeDispatcher::Deepep)
        || megatron_core_refuses_biased_expert_tp(model, training);
    let valid: Vec<u32> = divisors(expert_ffn)
        .into_iter()
        .filter(|d| *d <= cluster.nvlink_domain())
        .filter(|d| stage_gpus.is_multiple_of(u64::from(r.ep) * u64::from(*d)))
        .filter(|d| !unsplit_only || *d == 1)
        .collect();
    if valid.is_empty() {
        format!(
            "none with --ep {} (ep x etp must divide the {stage_gpus} GPUs of a pipeline stage, tp x cp x dp, and --ep {} alone does not); change --ep",
            r.ep, r.ep
        )
    } else {
        list(valid)
    }
}

/// The TP degrees that the three rules of [`check_heads`] on the model's attention and MLP
/// (heads, KV heads, dense MLP width) all admit, inside one NVLink domain unless TP may cross
/// it: what each of their refusals offers, so that taking any degree it lists passes the other
/// two (Qwen2.5-7B's 28 heads over 4 KV heads: 1, 2, 4, where the heads alone gave 7 too).
/// Each also leaves tp x cp x pp dividing the cluster's GPUs, as the request's own degrees do
/// (tp 2 beside pp 1 on 3 GPUs would be refused in turn); tp 1 always does.
fn valid_tp_degrees(r: &PlanRequest, model: &Model, cluster: &Cluster) -> String {
    list(divisors(model.heads).into_iter().filter(|d| {
        (model.kv_heads.is_multiple_of(*d) || d.is_multiple_of(model.kv_heads))
            && (model.dense_layers() == 0 || model.ffn_hidden.is_multiple_of(*d))
            && (*d <= cluster.nvlink_domain() || r.allow_cross_node_tp)
            && u64::from(cluster.total_gpus())
                .is_multiple_of(u64::from(*d) * u64::from(r.cp) * u64::from(r.pp))
    }))
}

/// TP divides the attention heads, and divides or is a multiple of the KV heads.
pub(super) fn check_heads(
    r: &PlanRequest,
    model: &Model,
    cluster: &Cluster,
    training: &Training,
) -> Result<(), PlanError> {
    if !model.heads.is_multiple_of(r.tp) {
        return Err(PlanError::TpHeads {
            tp: r.tp,
            heads: model.heads,
            valid: valid_tp_degrees(r, model, cluster),
        });
    }
    // Megatron-Core replicates KV heads when tp is a multiple of them (`num_query_groups <
    // tp`: each rank holds one group), so either direction of divisibility is a valid split.
    if !model.kv_heads.is_multiple_of(r.tp) && !r.tp.is_multiple_of(model.kv_heads) {
        return Err(PlanError::TpKvHeads {
            tp: r.tp,
            kv_heads: model.kv_heads,
            valid: valid_tp_degrees(r, model, cluster),
        });
    }
    // Megatron's column-parallel MLP splits its width over the TP ranks (`divide(output_size,
    // world_size)` in `ColumnParallelLinear` asserts it divides), and the grouped experts theirs
    // over the expert-TP ranks.
    if model.dense_layers() > 0 && !model.ffn_hidden.is_multiple_of(r.tp) {
        return Err(PlanError::TpFfn {
            flag: "--tp",
            tp: r.tp,
            what: "MLP width",
            ffn: model.ffn_hidden,
            valid: valid_tp_degrees(r, model, cluster),
        });
    }
    if let Some(moe) = model.moe {
        let etp = r.etp.max(1);
        if !moe.ffn_hidden.is_multiple_of(etp) {
            return Err(PlanError::TpFfn {
                flag: "--etp",
                tp: etp,
                what: "expert MLP width",
                ffn: moe.ffn_hidden,
                valid: valid_etp(r, model, cluster, training),
            });
        }
        // The shared experts are a dense MLP split over the TP ranks.
        if moe.shared_expert_ffn_hidden > 0 && !moe.shared_expert_ffn_hidden.is_multiple_of(r.tp) {
            return Err(PlanError::TpFfn {
                flag: "--tp",
                tp: r.tp,
                what: "shared-expert MLP width",
                ffn: moe.shared_expert_ffn_hidden,
                valid: list(
                    divisors(moe.shared_expert_ffn_hidden)
                        .into_iter()
                        .filter(|d| {
                            model.heads.is_multiple_of(*d) && *d <= cluster.nvlink_domain()
                        }),
                ),
            });
        }
    }
    Ok(())
}

/// TP stays inside an NVLink domain (unless allowed) and divides it; SP needs TP.
pub(super) fn check_tensor_placement(r: &PlanRequest, cluster: &Cluster) -> Result<(), PlanError> {
    let domain = cluster.nvlink_domain();
    if r.tp > domain {
        if !r.allow_cross_node_tp {
            return Err(PlanError::TpCrossNode {
                tp: r.tp,
                gpus_per_node: domain,
            });
        }
    } else if !domain.is_multiple_of(r.tp) {
        return Err(PlanError::TpNode {
            tp: r.tp,
            gpus_per_node: domain,
            valid: list(divisors(domain)),
        });
    }
    if r.sequence_parallel && r.tp == 1 {
        return Err(PlanError::SpWithoutTp);
    }
    Ok(())
}
