//! Figure 4: where the GPUs are. Nodes are boxes of GPU cells; each cell is labelled with its
//! (dp, pp, tp) coordinates — (dp, cp, pp, tp) with context parallelism — and coloured by pipeline
//! stage; each TP group is outlined in black, each block of interleaved CP rings in blue and each
//! block of interleaved EP groups in red (one group when etp = 1), with an arrowhead where a block
//! goes on in the next cell row or node; with expert parallelism a second line gives the cell's
//! (expert-dp, ep) coordinates.
//! Ranks follow Megatron-Core's order tp → cp → dp → pp (`RankGenerator`, the strides of
//! `cost::groups`): global rank r = tp_i + tp·(cp_i + cp·(dp_i + dp·pp_i)), node r / gpus_per_node.
//! The experts fold over the same tp·cp·dp GPUs of a stage in the order etp → ep → expert-dp
//! (`cost::moe`): stage rank s = etp_i + etp·(ep_i + ep·edp_i).
//!
//! Up to `MAX_NODES` nodes every GPU is drawn. Beyond that, only the nodes holding data-parallel
//! replica 0 are drawn (first `MAX_NODES` of them) — with expert parallelism, every node of each
//! stage's first EP block, so one whole EP group shows — every GPU on them labelled, and the rest
//! are folded into one line saying how many nodes repeat the same layout.

use plotters::prelude::*;

use super::svg::{FONT, stage_colour, svg};
use crate::cluster::{Cluster, Link};
use crate::cost::groups::{Group, GroupKind, groups};
use crate::plan::ParallelPlan;
use crate::training::CpExchange;

pub const MAX_NODES: u32 = 32;
const CELL_W: i32 = 58;
const CELL_H: i32 = 30;
/// Cells with CP or EP outlines inside them: wider and taller, so the text sits clear of them.
const WIDE_CELL_W: i32 = 66;
const CP_CELL_H: i32 = 36;
const EP_CELL_H: i32 = 44;
const PAD: i32 = 8;
const HEADER: i32 = 18;
/// Outline colours of the CP-ring blocks and EP groups (TP groups are black).
const CP_OUTLINE: RGBColor = RGBColor(0x1f, 0x5f, 0xbf);
const EP_OUTLINE: RGBColor = RGBColor(0xc0, 0x20, 0x20);

/// Where one global rank sits in every dimension of the plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RankCoordinates {
    pub tp: u32,
    pub cp: u32,
    pub dp: u32,
    pub pp: u32,
    /// Expert-parallel rank inside the stage (0 without expert parallelism).
    pub ep: u32,
    /// Expert data-parallel replica inside the stage.
    pub expert_dp: u32,
}

/// Coordinates of a global rank in Megatron-Core's order (see the module comment).
pub fn rank_coordinates(rank: u32, plan: &ParallelPlan) -> RankCoordinates {
    let stage_gpus = plan.tp * plan.cp * plan.dp;
    let s = rank % stage_gpus;
    RankCoordinates {
        tp: rank % plan.tp,
        cp: rank / plan.tp % plan.cp,
        dp: rank / (plan.tp * plan.cp) % plan.dp,
        pp: rank / stage_gpus,
        ep: s / plan.etp % plan.ep,
        expert_dp: s / (plan.etp * plan.ep),
    }
}

/// (dp, pp, tp) coordinates of a global rank.
pub fn coordinates(rank: u32, plan: &ParallelPlan) -> (u32, u32, u32) {
    let c = rank_coordinates(rank, plan);
    (c.dp, c.pp, c.tp)
}

/// Where a group's traffic goes, from the link the cost model gave it (`cost::groups`) and whether
/// one copy of it spans nodes: on NVL72 a group wider than a tray stays on NVLink across trays,
/// which "inside a node" would misplace.
fn link(g: &Group, gpus_per_node: u32) -> &'static str {
    let across_nodes = g.size > 1 && (g.size - 1) * g.stride >= gpus_per_node;
    match (g.link, across_nodes) {
        (Link::Nvlink, false) => "NVLink (inside a node)",
        (Link::Nvlink, true) => "NVLink (across nodes of one NVLink domain)",
        (Link::Network, _) => "the network (across nodes)",
    }
}

/// A gradient ring's link: where several of its ranks share a node (or an NVL72 NVLink segment),
/// in `plan`'s words ("network and NVLink (4 ranks per node, each with its own NIC; ...)").
fn ring_link(g: &Group, cluster: &Cluster) -> String {
    match super::table::shared_nic_ring_words(g.link, g.members_per_node, cluster) {
        Some((link, detail)) => format!("{link} ({detail})"),
        None => link(g, cluster.gpus_per_node).to_string(),
    }
}

/// The subtitle's words for the blue outline: rings where the exchange is one.
/// With tp 1 a block holds one group, and nothing is interleaved.
fn cp_block_words(cp_exchange: CpExchange, tp: u32) -> &'static str {
    let ring = matches!(cp_exchange, CpExchange::KvRing | CpExchange::TorchAllGather);
    match (ring, tp > 1) {
        (true, true) => "; blue: a block of interleaved CP rings",
        (true, false) => "; blue: one CP ring",
        (false, true) => "; blue: a block of interleaved CP groups",
        (false, false) => "; blue: one CP group",
    }
}

/// `cp_exchange` names what the CP groups move (`--cp-exchange`): only the rings pass K/V around.
pub(crate) fn layout_svg(
    cluster: &Cluster,
    plan: &ParallelPlan,
    cp_exchange: CpExchange,
    pp_schedule: crate::training::PipelineSchedule,
) -> Result<String, String> {
    let gpn = cluster.gpus_per_node;
    let g = groups(cluster, plan);
    let (cp, ep) = (plan.cp > 1, plan.ep > 1);
    let (nodes, folded_note): (Vec<u32>, Option<String>) = if cluster.nodes <= MAX_NODES {
        ((0..cluster.nodes).collect(), None)
    } else {
        // The ranks of data-parallel replica 0: every tp and cp index of every stage. With
        // expert parallelism, also the rest of the stage's first block of interleaved EP groups
        // (its first etp·ep ranks, `cost::moe`'s fold), which runs over several replicas when
        // etp·ep > tp·cp: drawing replica 0 alone would cut the red outline at the first node
        // (DeepSeek-V3, tp 8 ep 64 on 256 nodes: one EP group over 8 nodes, 1 drawn).
        let tp_cp = plan.tp * plan.cp;
        let stage_ranks = tp_cp * plan.dp;
        let span = if ep {
            tp_cp.max(plan.etp * plan.ep)
        } else {
            tp_cp
        };
        let mut replica0: Vec<u32> = (0..plan.pp)
            .flat_map(|p| (0..span).map(move |i| (i + stage_ranks * p) / gpn))
            .collect();
        replica0.dedup();
        let total = replica0.len() as u32;
        // A node holds gpn / (tp·cp) replicas side by side where one replica's stage is narrower
        // than a node (tp 2 on 8 GPUs: replicas 0..3 on node 0), and all of them are drawn: the
        // undrawn nodes hold the replicas past the last one on the drawn nodes.
        let drawn_replicas = replica0
            .iter()
            .map(|&node| rank_coordinates((node + 1) * gpn - 1, plan).dp + 1)
            .max()
            .unwrap_or(1);
        replica0.truncate(MAX_NODES as usize);
        // Past MAX_NODES, replica 0's own later nodes are undrawn too: the rest of the cluster is
        // those and the other replicas, each counted.
        let note = format!(
            "{} of {} nodes drawn: those holding data-parallel {}{}; the other {} nodes hold replicas {}..{} in the same layout",
            replica0.len(),
            cluster.nodes,
            if drawn_replicas > 1 {
                format!("replicas 0..{}", drawn_replicas - 1)
            } else {
                "replica 0".to_string()
            },
            if total > MAX_NODES {
                // "its" for replica 0 alone; "their" where the drawn nodes hold several replicas
                // side by side or an EP group over several (round 27: "replicas 0..63 (its ...").
                let (first, other) = if drawn_replicas > 1 {
                    ("the first", "their")
                } else {
                    ("its first", "its")
                };
                format!(
                    " ({first} {MAX_NODES} of {total}; {other} other {} hold the rest of {other} stages)",
                    total - MAX_NODES
                )
            } else {
                String::new()
            },
            cluster.nodes - total,
            drawn_replicas,
            plan.dp.saturating_sub(1)
        );
        (replica0, Some(note))
    };
    let cell_w = if cp || ep { WIDE_CELL_W } else { CELL_W };
    let cell_h = match (cp, ep) {
        (_, true) => EP_CELL_H,
        (true, false) => CP_CELL_H,
        _ => CELL_H,
    };
    let per_row = gpn.min(8) as i32;
    let rows_per_node = (gpn as i32 + per_row - 1) / per_row;
    let node_w = per_row * cell_w + 2 * PAD;
    let node_h = rows_per_node * cell_h + 2 * PAD + HEADER;
    let node_cols: i32 = if per_row >= 8 { 2 } else { 4 };
    let node_rows = (nodes.len() as i32 + node_cols - 1) / node_cols;
    let top = 70;

    let tp_group = g.get(GroupKind::Tp);
    let cp_group = g.get(GroupKind::Cp);
    let dp_group = g.get(GroupKind::Dp);
    let pp_group = g.get(GroupKind::Pp);
    let ep_group = g.get(GroupKind::Ep);
    let expert_dp_group = g.get(GroupKind::ExpertDp);
    let replica_group = g.get(GroupKind::DpReplica);
    let mut legend = vec![if plan.tp > 1 {
        format!(
            "TP groups ({} GPUs, black outline) {} every layer over {}",
            plan.tp,
            if plan.sequence_parallel {
                "all-gather and reduce-scatter"
            } else {
                "all-reduce"
            },
            link(tp_group, gpn)
        )
    } else {
        "TP: none (tp 1: each GPU holds whole layers)".to_string()
    }];
    if cp {
        let (groups, moves, group) = match cp_exchange {
            CpExchange::KvRing | CpExchange::TorchAllGather => ("rings", "pass K/V", "ring"),
            CpExchange::KvAllGather => {
                ("groups", "all-gather K/V and reduce-scatter dK/dV", "group")
            }
            CpExchange::HeadAllToAll => (
                "groups",
                "trade Q, K, V and the attention output all-to-all",
                "group",
            ),
        };
        // With tp 1 the outline holds one group: nothing is interleaved.
        let outline = if plan.tp > 1 {
            format!(
                "the {} GPUs of {} interleaved {groups}",
                plan.tp * plan.cp,
                plan.tp
            )
        } else {
            format!("the {} GPUs of one {group}", plan.cp)
        };
        legend.push(format!(
            "CP groups: {groups} of {} GPUs at stride {} {moves} every layer over {}; blue outline: {outline} (c = {group} position)",
            plan.cp,
            cp_group.stride,
            link(cp_group, gpn),
        ));
    }
    legend.push(if plan.pp > 1 && pp_schedule.v_kind().is_some() {
        // The V (`cost::v_schedule`): GPU stage s runs model chunks s and 2p - 1 - s.
        format!(
            "PP ({}): stage s runs model chunks s and {} - s; activations go down the stages through the first chunks and back up through the second (the last stage hands its first chunk's output to its own second), next {} ranks, over {}",
            pp_schedule.words(2),
            2 * plan.pp - 1,
            pp_group.stride,
            link(pp_group, gpn)
        )
    } else if plan.pp > 1 {
        format!(
            "PP: stage s sends activations to stage s+1 (next {} ranks) over {}",
            pp_group.stride,
            link(pp_group, gpn)
        )
    } else {
        "PP: none (pp 1: no stage boundaries)".to_string()
    });
    legend.push(if cp {
        format!(
            "DP x CP: {} GPUs (dp {} x cp {}; same pp, tp; stride {}) reduce gradients over {}",
            dp_group.size,
            plan.dp,
            plan.cp,
            dp_group.stride,
            ring_link(dp_group, cluster)
        )
    } else if plan.dp_replicas > 1 {
        format!(
            "DP: the {} replicas of one copy (same pp, tp; stride {}) reduce-scatter gradients over {}",
            dp_group.size,
            dp_group.stride,
            ring_link(dp_group, cluster)
        )
    } else if plan.dp == 1 {
        // One replica: nothing to reduce gradients with (`ring_link` would name a link for a
        // group of one).
        "DP: none (dp 1: one replica, no gradient reduction)".to_string()
    } else {
        format!(
            "DP: {} replicas (same pp, tp; stride {}) reduce gradients over {}",
            plan.dp,
            dp_group.stride,
            ring_link(dp_group, cluster)
        )
    });
    // Hybrid sharding: the DP group above is one copy's ranks (`GroupKind::Dp` is sized
    // dp·cp / copies); the copies all-reduce each reduced shard (`GroupKind::DpReplica`).
    if plan.dp_replicas > 1 {
        legend.push(format!(
            "copies of the sharded states: {} copies, each sharded over the {} consecutive DP{} ranks above; each reduced shard is all-reduced across the copies (stride {}) over {}",
            plan.dp_replicas,
            dp_group.size,
            if cp { " x CP" } else { "" },
            replica_group.stride,
            ring_link(replica_group, cluster)
        ));
    }
    if ep {
        legend.push(format!(
            "EP groups ({} GPUs at stride {}; e = expert-parallel rank) exchange tokens all-to-all every MoE layer over {}; red outline: {}",
            plan.ep,
            ep_group.stride,
            link(ep_group, gpn),
            if plan.etp > 1 {
                format!(
                    "the {} GPUs of {} interleaved EP groups",
                    plan.etp * plan.ep,
                    plan.etp
                )
            } else {
                "one EP group".to_string()
            }
        ));
        legend.push(if expert_dp_group.size > 1 {
            format!(
                "expert DP: {} replicas of each expert (x = expert-DP index, stride {}) reduce expert gradients over {}",
                expert_dp_group.size,
                expert_dp_group.stride,
                ring_link(expert_dp_group, cluster)
            )
        } else {
            "expert DP: none (one copy of each expert; its gradients need no reduction)".to_string()
        });
    }
    if (cp && plan.tp * plan.cp > per_row as u32) || (ep && plan.etp * plan.ep > per_row as u32) {
        legend.push(
            "an outline with an arrowhead at one end goes on in the next row of cells or the next node".to_string(),
        );
    }
    let legend_h = 20 * (legend.len() as i32 + i32::from(folded_note.is_some())) + 30;
    // Wide enough for the longest legend line (a ring's link words can run long).
    let longest = legend
        .iter()
        .chain(folded_note.iter())
        .map(|l| super::svg::text_width_px(l, 13.0).ceil() as i32 + 2 * PAD)
        .max()
        .unwrap_or(0);
    let width = (node_cols * (node_w + PAD) + 2 * PAD)
        .max(if cp || ep { 1000 } else { 760 })
        .max(longest);
    let height = top + node_rows * (node_h + PAD) + legend_h;
    svg(width as u32, height as u32, |root| {
        let mut title = format!("Where the GPUs are: tp {}", plan.tp);
        if cp {
            title += &format!(" x cp {}", plan.cp);
        }
        title += &format!(
            " x pp {} x dp {} on {} node{} of {} GPUs",
            plan.pp,
            plan.dp,
            cluster.nodes,
            if cluster.nodes == 1 { "" } else { "s" },
            gpn
        );
        if ep {
            title += &format!(
                "; experts: etp {} x ep {} x expert-dp {}",
                plan.etp, plan.ep, expert_dp_group.size
            );
        }
        root.draw(&Text::new(
            title,
            (PAD, 10),
            (FONT, 20).into_font().color(&BLACK),
        ))?;
        let coordinates_text = if cp {
            "each cell: (dp, c, pp, tp) coordinates"
        } else {
            "each cell: (dp, pp, tp) coordinates"
        };
        let mut subtitle =
            format!("{coordinates_text}; colour: pipeline stage; black outline: one TP group");
        if cp {
            subtitle += cp_block_words(cp_exchange, plan.tp);
        }
        if ep {
            subtitle += if plan.etp > 1 {
                "; second line x·e: expert-DP and EP rank; red: a block of interleaved EP groups"
            } else {
                "; second line x·e: expert-DP and EP rank; red: one EP group"
            };
        }
        root.draw(&Text::new(
            subtitle,
            (PAD, 40),
            (FONT, 13).into_font().color(&BLACK),
        ))?;
        let label_font = (FONT, 11).into_font().color(&BLACK);
        let cell_pos = |slot: usize, local: u32| -> (i32, i32) {
            let col = slot as i32 % node_cols;
            let row = slot as i32 / node_cols;
            let x0 = PAD + col * (node_w + PAD);
            let y0 = top + row * (node_h + PAD);
            let lc = local as i32 % per_row;
            let lr = local as i32 / per_row;
            (x0 + PAD + lc * cell_w, y0 + PAD + HEADER + lr * cell_h)
        };
        for (slot, &node) in nodes.iter().enumerate() {
            let col = slot as i32 % node_cols;
            let row = slot as i32 / node_cols;
            let x0 = PAD + col * (node_w + PAD);
            let y0 = top + row * (node_h + PAD);
            root.draw(&Rectangle::new(
                [(x0, y0), (x0 + node_w, y0 + node_h)],
                RGBColor(0x55, 0x55, 0x55).stroke_width(1),
            ))?;
            let stages: Vec<u32> = {
                let mut v: Vec<u32> = (0..gpn)
                    .map(|l| rank_coordinates(node * gpn + l, plan).pp)
                    .collect();
                v.dedup();
                v
            };
            let stage_text = match stages.as_slice() {
                [one] => format!("stage {one}"),
                many => format!("stages {}–{}", many[0], many[many.len() - 1]),
            };
            root.draw(&Text::new(
                format!("node {node}: {stage_text}"),
                (x0 + PAD, y0 + 4),
                (FONT, 12).into_font().color(&BLACK),
            ))?;
            for local in 0..gpn {
                let rank = node * gpn + local;
                let c = rank_coordinates(rank, plan);
                let (x, y) = cell_pos(slot, local);
                root.draw(&Rectangle::new(
                    [(x + 1, y + 1), (x + cell_w - 1, y + cell_h - 1)],
                    stage_colour(c.pp).filled(),
                ))?;
                let label = if cp {
                    format!("({},{},{},{})", c.dp, c.cp, c.pp, c.tp)
                } else {
                    format!("({},{},{})", c.dp, c.pp, c.tp)
                };
                // Inside the CP (inset 3) and EP (inset 6) outlines, clear of their strokes.
                let (text_x, label_y) = match (cp, ep) {
                    (_, true) => (x + 9, y + 9),
                    (true, false) => (x + 7, y + 12),
                    _ => (x + 5, y + 9),
                };
                root.draw(&Text::new(label, (text_x, label_y), label_font.clone()))?;
                if ep {
                    root.draw(&Text::new(
                        format!("x{}·e{}", c.expert_dp, c.ep),
                        (text_x, y + 23),
                        label_font.clone(),
                    ))?;
                }
            }
            // Group outlines: runs of consecutive local ranks in the same block of `span` ranks,
            // one outline per run within a cell row, inset so nested outlines stay visible. A
            // block that goes on past the run (onto the next cell row or node) gets an arrowhead
            // on that side, so a block over two nodes reads as one block, not as two.
            let outline = |span: u32,
                           inset: i32,
                           colour: RGBColor|
             -> Result<(), Box<dyn std::error::Error>> {
                let mut local = 0;
                while local < gpn {
                    let block = (node * gpn + local) / span;
                    let mut end = local + 1;
                    while end < gpn
                        && (end as i32 % per_row) != 0
                        && (node * gpn + end) / span == block
                    {
                        end += 1;
                    }
                    let (xa, ya) = cell_pos(slot, local);
                    let (xb, _) = cell_pos(slot, end - 1);
                    let (left, right) = (xa + inset, xb + cell_w - inset);
                    root.draw(&Rectangle::new(
                        [(left, ya + inset), (right, ya + cell_h - inset)],
                        colour.stroke_width(2),
                    ))?;
                    let mid = ya + cell_h / 2;
                    if !(node * gpn + local).is_multiple_of(span) {
                        root.draw(&Polygon::new(
                            vec![(left - 5, mid), (left + 2, mid - 5), (left + 2, mid + 5)],
                            colour.filled(),
                        ))?;
                    }
                    if !(node * gpn + end).is_multiple_of(span) {
                        root.draw(&Polygon::new(
                            vec![(right + 5, mid), (right - 2, mid - 5), (right - 2, mid + 5)],
                            colour.filled(),
                        ))?;
                    }
                    local = end;
                }
                Ok(())
            };
            if plan.tp > 1 {
                outline(plan.tp, 0, BLACK)?;
            }
            if cp {
                // A CP ring's members stride tp, so the tp·cp consecutive ranks hold tp rings.
                outline(plan.tp * plan.cp, 3, CP_OUTLINE)?;
            }
            if ep {
                // Each EP group's members stride etp: etp·ep consecutive ranks of a stage hold etp
                // groups (one when etp = 1). Stages hold tp·cp·dp ranks, a multiple of etp·ep.
                outline(plan.etp * plan.ep, 6, EP_OUTLINE)?;
            }
        }
        let ly = top + node_rows * (node_h + PAD) + 10;
        for (i, line) in legend.iter().chain(folded_note.iter()).enumerate() {
            // The CP and EP lines in their outline's colour, as a key to it.
            let colour = if line.starts_with("CP groups") {
                CP_OUTLINE
            } else if line.starts_with("EP groups") {
                EP_OUTLINE
            } else {
                BLACK
            };
            root.draw(&Text::new(
                line.clone(),
                (PAD, ly + 20 * i as i32),
                (FONT, 13).into_font().color(&colour),
            ))?;
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::PlanRequest;
    use crate::specs;
    use crate::training::{Training, TrainingFramework};

    #[test]
    fn rank_coordinates_follow_megatron_core_order_and_group_strides() {
        let model = specs::load_model("mixtral-8x7b").unwrap();
        let cluster = Cluster {
            gpu: specs::load_gpu("h100-sxm-80g").unwrap(),
            nodes: 8,
            gpus_per_node: 8,
        };
        let framework = TrainingFramework::MegatronCore;
        let training = Training {
            fp8_param_gather: false,
            ..Training::with_framework(
                framework,
                4096,
                256,
                crate::training::AttentionKernel::Flash,
            )
        };
        let request = PlanRequest {
            tp: 2,
            cp: 2,
            pp: 2,
            dp: 8,
            ep: 4,
            etp: 2,
            sequence_parallel: true,
            ..PlanRequest::default()
        };
        let plan = ParallelPlan::build(&request, &model, &cluster, &training).unwrap();
        let g = groups(&cluster, &plan);
        // Stepping by a group's stride moves along that dimension only.
        for rank in [0, 5, 17, 40] {
            let c = rank_coordinates(rank, &plan);
            let cp_next = rank_coordinates(rank + g.get(GroupKind::Cp).stride, &plan);
            if c.cp + 1 < plan.cp {
                assert_eq!((cp_next.cp, cp_next.tp, cp_next.dp), (c.cp + 1, c.tp, c.dp));
            }
            let pp_next = rank_coordinates(rank + g.get(GroupKind::Pp).stride, &plan);
            assert_eq!(
                (pp_next.pp, pp_next.tp, pp_next.cp, pp_next.dp),
                (c.pp + 1, c.tp, c.cp, c.dp)
            );
            let ep_next = rank_coordinates(rank + g.get(GroupKind::Ep).stride, &plan);
            if c.ep + 1 < plan.ep {
                assert_eq!((ep_next.ep, ep_next.expert_dp), (c.ep + 1, c.expert_dp));
            }
        }
        // 32 GPUs per stage over etp 2 x ep 4: 4 expert-DP replicas.
        assert_eq!(rank_coordinates(31, &plan).expert_dp, 3);
        assert_eq!(rank_coordinates(31, &plan).dp, 7);
        let svg = layout_svg(
            &cluster,
            &plan,
            CpExchange::KvRing,
            crate::training::PipelineSchedule::OneFOneB,
        )
        .unwrap();
        assert!(svg.contains("CP groups: rings of 2 GPUs at stride 2"));
        assert!(svg.contains("EP groups (4 GPUs at stride 2"));
    }
}
