//! A plan's communication groups as data: each parallel dimension is one kind of group with its
//! size, its stride in the rank order and where it sits (NVLink domain or network). The cost model,
//! the ledger and the report read these instead of spelling out TP, CP, PP and DP by hand; a new
//! dimension is a new `GroupKind` and its terms.
//!
//! Rank order (Megatron-Core `RankGenerator`, megatron/core/parallel_state.py, order
//! "tp-cp-ep-dp-pp"): TP ranks are adjacent, CP ranks stride tp, DP ranks stride tp·cp, PP ranks
//! stride tp·cp·dp. Gradients are reduced over the DP and CP ranks together (Megatron's
//! `data_parallel_group_with_context_parallel`): a group of dp·cp ranks at stride tp.

use serde::Serialize;

use super::comm::Placement;
use crate::cluster::{Cluster, Link, LinkSpeed};
use crate::plan::ParallelPlan;

/// The kinds of communication group a plan has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GroupKind {
    /// Tensor parallelism: Megatron's column/row splits.
    Tp,
    /// Context parallelism: the sequence split, K/V exchanged around a ring.
    Cp,
    /// Gradient reduction and ZeRO sharding: the DP replicas together with the CP ranks (with
    /// several copies of the sharded states, `ParallelPlan::dp_replicas`, the ranks of one copy).
    Dp,
    /// The copies of the ZeRO-sharded states (hybrid sharding): ranks holding the same shard in
    /// different copies, which all-reduce their gradient shard (stride tp·dp·cp / dp_replicas;
    /// size 1 with one copy). Megatron-Core's inter-instance group.
    DpReplica,
    /// Pipeline neighbours.
    Pp,
    /// Expert parallelism: the MoE token all-to-all (stride etp inside a stage's tp·cp·dp GPUs).
    Ep,
    /// Expert data parallelism: the expert gradients' reduction (stride etp·ep; the ranks of one
    /// copy of the sharded expert states).
    ExpertDp,
    /// The copies of the sharded expert states, as `DpReplica` for the dense ones.
    ExpertDpReplica,
    /// Expert tensor parallelism: the ranks that split each expert's weights (stride 1); the
    /// dispatched tokens are all-gathered among them and the expert outputs reduce-scattered.
    ExpertTp,
}

impl GroupKind {
    pub const ALL: [GroupKind; 9] = [
        GroupKind::Tp,
        GroupKind::Cp,
        GroupKind::Dp,
        GroupKind::DpReplica,
        GroupKind::Pp,
        GroupKind::Ep,
        GroupKind::ExpertDp,
        GroupKind::ExpertDpReplica,
        GroupKind::ExpertTp,
    ];
    pub const COUNT: usize = GroupKind::ALL.len();
    pub fn as_str(self) -> &'static str {
        match self {
            GroupKind::Tp => "TP",
            GroupKind::Cp => "CP",
            GroupKind::Dp => "DP",
            GroupKind::DpReplica => "DP replicas",
            GroupKind::Pp => "PP",
            GroupKind::Ep => "EP",
            GroupKind::ExpertDp => "expert DP",
            GroupKind::ExpertDpReplica => "expert DP replicas",
            GroupKind::ExpertTp => "expert TP",
        }
    }
    fn index(self) -> usize {
        self as usize
    }
}

/// One communication group of a plan.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Group {
    pub kind: GroupKind,
    /// Ranks in the group (1: the group does not exist).
    pub size: u32,
    /// Distance in ranks between consecutive members.
    pub stride: u32,
    pub link: Link,
    /// Across nodes: members of one copy of the group that share a node (each brings its own NIC).
    pub members_per_node: u32,
    /// Achieved bus bandwidth and per-step latency where the group sits.
    #[serde(skip)]
    pub speed: LinkSpeed,
}

impl Group {
    pub fn placement(&self) -> Placement {
        Placement {
            link: self.link,
            members_per_node: self.members_per_node,
        }
    }
}

/// Every group of a plan, indexed by kind; fixed-size so evaluation does not allocate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Groups {
    items: [Group; GroupKind::COUNT],
}

impl Groups {
    pub fn get(&self, kind: GroupKind) -> &Group {
        &self.items[kind.index()]
    }
    pub fn iter(&self) -> impl Iterator<Item = &Group> {
        self.items.iter()
    }
}

/// Placement of a group of `size` ranks at `stride`: on NVLink when every copy of the group lies
/// inside one NVLink domain (a node, or a 72-GPU NVL72 rack), else on the network. Across the
/// network, members sharing a node each use their own NIC (on NVL72, members sharing a rack: the
/// smallest block of any copy); on 8-GPU nodes a group that straddles node boundaries unevenly is
/// counted at one NIC per crossing.
fn place(cluster: &Cluster, stride: u32, size: u32) -> Placement {
    let span = u64::from(stride) * u64::from(size);
    let domain = u64::from(cluster.nvlink_domain());
    let gpn = u64::from(cluster.gpus_per_node);
    // In a multi-node NVLink domain (NVL72) a job is allocated in segments of whole trays inside one
    // rack (Slurm's block topology, `--segment`), so a group spanning whole trays and no more than
    // the domain stays on NVLink even when it does not divide 72.
    let whole_trays_in_rack = domain > gpn && span <= domain && span % gpn == 0;
    if size <= 1 || (span <= domain && domain % span == 0) || whole_trays_in_rack {
        return Placement {
            link: Link::Nvlink,
            members_per_node: 1,
        };
    }
    let members_per_node = if domain > gpn {
        // A multi-node NVLink domain (NVL72): the ring's members inside one rack reach each other
        // over NVLink, so every one of their NICs carries a share of the ring's crossings (NCCL
        // spreads its channels over the NICs); the rack with the fewest members sets the pace.
        let per_domain = cluster.nvlink_domain();
        if per_domain.is_multiple_of(stride) {
            let groups = cluster.total_gpus() / (stride * size).max(1);
            smallest_domain_block(size, per_domain / stride, groups)
        } else {
            1
        }
    } else if u64::from(stride) >= gpn || span % gpn != 0 {
        1
    } else {
        cluster.gpus_per_node / stride
    };
    Placement {
        link: Link::Network,
        members_per_node: members_per_node.max(1),
    }
}

/// Of `groups` consecutive groups of `members` laid over domains of `per_domain` slots, the
/// smallest block any group has inside one domain (the pattern repeats every
/// per_domain / gcd(members, per_domain) groups, so at most `per_domain` are looked at).
pub(crate) fn smallest_domain_block(members: u32, per_domain: u32, groups: u32) -> u32 {
    if members == 0 || per_domain == 0 {
        return 1;
    }
    let mut smallest = members.min(per_domain);
    let common = crate::integer::gcd(u64::from(members), u64::from(per_domain)) as u32;
    let period = (per_domain / common).min(groups.max(1));
    for group in 0..period {
        let start = u64::from(group) * u64::from(members) % u64::from(per_domain);
        let first = (u64::from(per_domain) - start).min(u64::from(members)) as u32;
        let tail = (members - first) % per_domain;
        smallest = smallest.min(first);
        if tail > 0 {
            smallest = smallest.min(tail);
        }
    }
    smallest
}

/// The groups of `plan` on `cluster`.
pub fn groups(cluster: &Cluster, plan: &ParallelPlan) -> Groups {
    let make = |kind: GroupKind, stride: u32, size: u32, point_to_point: bool| {
        let mut placement = place(cluster, stride, size);
        if point_to_point && placement.link == Link::Network {
            // Pipeline neighbours: one GPU sends to one GPU, through its own NIC.
            placement.members_per_node = 1;
        }
        Group {
            kind,
            size,
            stride,
            link: placement.link,
            members_per_node: placement.members_per_node,
            speed: cluster.group_speed(placement.link, placement.members_per_node),
        }
    };
    let (tp, cp, dp) = (plan.tp, plan.cp, plan.dp);
    let (ep, etp) = (plan.ep, plan.etp);
    let mut expert_ep = make(GroupKind::Ep, etp, ep, false);
    // All-to-all: every pair talks, so across nodes each GPU sends through its own NIC (the ring
    // aggregate of several NICs does not apply) while its domain-local share goes over NVLink.
    if expert_ep.link == Link::Network {
        expert_ep.members_per_node = 1;
        expert_ep.speed = super::moe::alltoall_network_speed(cluster, etp, ep);
    }
    // Several copies of the sharded states: one copy's ranks are consecutive in the DP×CP (or
    // expert-DP) order, the copies stride past them (Megatron-Core's intra- and inter-instance
    // groups, parallel_state.py).
    // A plan's copies divide its expert-DP ranks too (`ParallelPlan::build`), so the experts
    // take the same count.
    let replicas = plan.dp_replicas.max(1);
    let shard = plan.zero_shard_ranks();
    let expert_shard = super::moe::expert_shard_ranks(plan);
    Groups {
        items: [
            make(GroupKind::Tp, 1, tp, false),
            make(GroupKind::Cp, tp, cp, true),
            make(GroupKind::Dp, tp, shard, false),
            make(GroupKind::DpReplica, tp * shard, replicas, false),
            make(GroupKind::Pp, tp * cp * dp, plan.pp, true),
            expert_ep,
            make(GroupKind::ExpertDp, etp * ep, expert_shard, false),
            make(
                GroupKind::ExpertDpReplica,
                etp * ep * expert_shard,
                replicas,
                false,
            ),
            make(GroupKind::ExpertTp, 1, etp, false),
        ],
    }
}

/// Whether the pipeline boundary from stage `boundary` to the next (`boundary + 1`, and for
/// `boundary = pp − 1` the wrap back to stage 0 that interleaved schedules use) stays inside one
/// NVLink domain for every pair of ranks that exchange across it.
///
/// Megatron-Core orders ranks tp-cp-ep-dp-pp (`RankGenerator`, parallel_state.py at d98e8a64):
/// stage i holds the `stride = tp·cp·dp` consecutive ranks from i·stride and rank r sends to
/// r + stride (`get_pipeline_model_parallel_next_rank`, the PP group as a ring). torchtitan's
/// mesh ("pp", "dp_replicate", "dp_shard", "cp", "tp", torchtitan/distributed/parallel_dims.py at
/// b5bcd76c) and DeepSpeed's `PipeModelDataParallelTopology` (axes pipe, data, model,
/// deepspeed/runtime/pipe/topology.py) put the pipeline outermost too, so the same holds for
/// them. Every pair of boundary i shares a domain exactly when ranks i·stride ..
/// (i + 2)·stride − 1 lie in one block of `Cluster::nvlink_domain` consecutive ranks (a domain
/// edge anywhere inside splits one pair). The wrap pairs rank r with r − (pp − 1)·stride, so it
/// is on NVLink only when the whole PP group is (`place`).
pub fn pp_boundary_link(cluster: &Cluster, plan: &ParallelPlan, boundary: u32) -> Link {
    let pp = plan.pp.max(1);
    let stride = u64::from(plan.tp) * u64::from(plan.cp) * u64::from(plan.dp);
    let whole = place(cluster, stride as u32, pp).link;
    if whole == Link::Nvlink || boundary + 1 >= pp {
        return whole;
    }
    let domain = u64::from(cluster.nvlink_domain().max(1));
    let first = u64::from(boundary) * stride;
    let last = first + 2 * stride - 1;
    if first / domain == last / domain {
        Link::Nvlink
    } else {
        Link::Network
    }
}

/// The share of the stage-boundary sends of the pipeline's fill and drain that run at NVLink's
/// pace (`pp_boundary_link`). Under 1F1B each send waits on its own boundary (a micro-batch
/// crosses each of the p − 1 once each way); under the interleaved schedule every p2p op of a stage
/// sends to the next stage and receives from the previous at once (Megatron-Core
/// `send_forward_recv_forward`, `send_backward_recv_backward`, schedules.py at d98e8a64), so a
/// stage's sends run at NVLink's pace only when both its boundaries (the wrap included) are on
/// NVLink: the share of such stages. 0 without a pipeline.
pub fn pp_hop_nvlink_share(cluster: &Cluster, plan: &ParallelPlan) -> f64 {
    let pp = plan.pp;
    if pp <= 1 || plan.vpp <= 1 {
        return pp_chain_nvlink_share(cluster, plan);
    }
    let on_nvlink = |boundary: u32| pp_boundary_link(cluster, plan, boundary) == Link::Nvlink;
    let stages = (0..pp)
        .filter(|&s| on_nvlink(s) && on_nvlink((s + pp - 1) % pp))
        .count();
    stages as f64 / f64::from(pp)
}

/// The share of the p − 1 stage boundaries (the wrap left out) that stay inside one NVLink domain
/// (`pp_boundary_link`): the share of a chain's hops at NVLink's pace where each send waits on its
/// own boundary. 1F1B's micro-batch crosses each boundary once each way; a V schedule's chunk 0 runs
/// stages 0 → p − 1 and chunk 1 back p − 1 → 0 on the same GPUs (`v_schedule::virtual_stage`), so
/// its micro-batch crosses each boundary twice each way and never the wrap (the V's turn stays on
/// the last GPU, both ends on the first; `simulated::v_chunk_costs`). 0 without a pipeline.
pub fn pp_chain_nvlink_share(cluster: &Cluster, plan: &ParallelPlan) -> f64 {
    let pp = plan.pp;
    if pp <= 1 {
        return 0.0;
    }
    let nvlink = (0..pp - 1)
        .filter(|&b| pp_boundary_link(cluster, plan, b) == Link::Nvlink)
        .count();
    nvlink as f64 / f64::from(pp - 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::specs;

    fn cluster(gpu: &str, nodes: u32, gpus_per_node: u32) -> Cluster {
        Cluster {
            gpu: specs::load_gpu(gpu).unwrap(),
            nodes,
            gpus_per_node,
        }
    }

    #[test]
    fn megatron_rank_order_placements_on_8_gpu_nodes() {
        let c = cluster("h100-sxm-80g", 64, 8);
        // tp 8: TP on NVLink, DP one member per node.
        assert_eq!(place(&c, 1, 8).link, Link::Nvlink);
        assert_eq!(place(&c, 8, 4).members_per_node, 1);
        // tp 2 dp 4: DP inside a node.
        assert_eq!(place(&c, 2, 4).link, Link::Nvlink);
        // tp 1 dp 32: 8 members per node, each with its own NIC; tp 2 dp 16: 4.
        assert_eq!(place(&c, 1, 32).members_per_node, 8);
        assert_eq!(place(&c, 2, 16).members_per_node, 4);
        // dp 3 at stride 1 straddles nodes: network, one NIC per crossing.
        assert_eq!(place(&c, 1, 3).link, Link::Network);
    }

    #[test]
    fn a_ring_across_nvl72_racks_uses_every_nic_of_its_smallest_rack_block() {
        // Jobs of 128+ GPUs sit in 16-tray (64-GPU) segments, one per rack (NVIDIA's Slurm
        // segment guidance); smaller ones fill one 72-GPU rack.
        let small = cluster("gb200-nvl72", 18, 4);
        assert_eq!(small.nvlink_domain(), 72);
        let c = cluster("gb200-nvl72", 32, 4);
        assert_eq!(c.nvlink_domain(), 64);
        // The segment is 16 trays of the profile's 4 GPUs however the nodes are counted: the same
        // 128 GPUs as 16 nodes of 8 sit in the same 64-GPU segments.
        assert_eq!(cluster("gb200-nvl72", 16, 8).nvlink_domain(), 64);
        // DP 64 at stride 2 over two segments: 32 members in each, so 32 NICs carry the ring's
        // crossings (capped at NVLink) instead of the 2 members a 4-GPU tray holds.
        let dp = place(&c, 2, 64);
        assert_eq!(dp.link, Link::Network);
        assert_eq!(dp.members_per_node, 32);
        let speed = c.group_speed(dp.link, dp.members_per_node).bandwidth.0;
        assert_eq!(speed, c.link_speed(Link::Nvlink).bandwidth.0);
        // DP 16 at stride 8 (tp 8): 8 members per segment, on 128 GPUs and on 512 alike.
        assert_eq!(place(&c, 8, 16).members_per_node, 8);
        let big = cluster("gb200-nvl72", 128, 4);
        assert_eq!(place(&big, 8, 16).members_per_node, 8);
        // Without segments (a 72-GPU rack filled in rank order) a group can keep one member in a
        // rack: 16 members at stride 8 over 9-unit racks, the fourth group 1 + 9 + 6.
        assert_eq!(smallest_domain_block(16, 9, 4), 1);
    }

    #[test]
    fn nvl72_keeps_groups_inside_the_rack_on_nvlink() {
        // GB200 NVL72: 4 GPUs per tray, 72 per NVLink domain. TP 8 (2 trays) and a DP·CP group of
        // 8 at stride 8 (64 GPUs) stay on NVLink; 16 at stride 8 (128 GPUs) leaves the rack.
        let c = cluster("gb200-nvl72", 18, 4);
        assert_eq!(place(&c, 1, 8).link, Link::Nvlink);
        assert_eq!(place(&c, 8, 9).link, Link::Nvlink);
        // 8 at stride 8: a 64-GPU (16-tray) segment of the rack.
        assert_eq!(place(&c, 8, 8).link, Link::Nvlink);
        assert_eq!(place(&c, 8, 16).link, Link::Network);
        // The same TP 8 on 4-GPU trays without an NVLink domain would cross the network.
        let mut plain = c.clone();
        plain.gpu.nvlink_domain_gpus = None;
        assert_eq!(place(&plain, 1, 8).link, Link::Network);
    }
}
