//! Figure 4: where the GPUs are. Nodes are boxes of GPU cells; each cell is labelled with its
//! (dp, pp, tp) coordinates and coloured by pipeline stage; each TP group is outlined. Ranks follow
//! Megatron-LM's order tp → dp → pp (`RankGenerator`, as `comm::group_links` assumes): global rank
//! r = tp_i + tp·(dp_i + dp·pp_i), node r / gpus_per_node.
//!
//! Up to `MAX_NODES` nodes every GPU is drawn. Beyond that, only the nodes holding data-parallel
//! replica 0 are drawn (first `MAX_NODES` of them), every GPU on them labelled, and the rest are
//! folded into one line saying how many nodes repeat the same layout.

use plotters::prelude::*;

use super::svg::{FONT, stage_colour, svg};
use crate::cluster::{Cluster, Link};
use crate::cost::comm::group_links;
use crate::plan::ParallelPlan;

pub const MAX_NODES: u32 = 32;
const CELL_W: i32 = 58;
const CELL_H: i32 = 30;
const PAD: i32 = 8;
const HEADER: i32 = 18;

/// (dp, pp, tp) coordinates of a global rank.
pub fn coordinates(rank: u32, plan: &ParallelPlan) -> (u32, u32, u32) {
    let tp_i = rank % plan.tp;
    let dp_i = rank / plan.tp % plan.dp;
    let pp_i = rank / (plan.tp * plan.dp);
    (dp_i, pp_i, tp_i)
}

fn link(l: Link) -> &'static str {
    match l {
        Link::Nvlink => "NVLink (inside a node)",
        Link::Network => "the network (across nodes)",
    }
}

pub(crate) fn layout_svg(cluster: &Cluster, plan: &ParallelPlan) -> Result<String, String> {
    let gpn = cluster.gpus_per_node;
    let (nodes, folded_note): (Vec<u32>, Option<String>) = if cluster.nodes <= MAX_NODES {
        ((0..cluster.nodes).collect(), None)
    } else {
        let mut replica0: Vec<u32> = (0..plan.pp)
            .flat_map(|p| (0..plan.tp).map(move |t| (t + plan.tp * plan.dp * p) / gpn))
            .collect();
        replica0.dedup();
        let total = replica0.len() as u32;
        replica0.truncate(MAX_NODES as usize);
        let note = format!(
            "{} of {} nodes drawn: those holding data-parallel replica 0{}; the other {} nodes hold replicas 1..{} in the same layout",
            replica0.len(),
            cluster.nodes,
            if total > MAX_NODES {
                format!(" (its first {MAX_NODES} of {total})")
            } else {
                String::new()
            },
            cluster.nodes - replica0.len() as u32,
            plan.dp.saturating_sub(1)
        );
        (replica0, Some(note))
    };
    let per_row = gpn.min(8) as i32;
    let rows_per_node = (gpn as i32 + per_row - 1) / per_row;
    let node_w = per_row * CELL_W + 2 * PAD;
    let node_h = rows_per_node * CELL_H + 2 * PAD + HEADER;
    let node_cols: i32 = if per_row >= 8 { 2 } else { 4 };
    let node_rows = (nodes.len() as i32 + node_cols - 1) / node_cols;
    let top = 70;
    let legend_h = 110;
    let width = (node_cols * (node_w + PAD) + 2 * PAD).max(760);
    let height = top + node_rows * (node_h + PAD) + legend_h;
    let (tp_link, dp_link, pp_link) = group_links(cluster, plan);
    svg(width as u32, height as u32, |root| {
        let title = format!(
            "Where the GPUs are: tp {} x pp {} x dp {} on {} nodes of {} GPUs",
            plan.tp, plan.pp, plan.dp, cluster.nodes, gpn
        );
        root.draw(&Text::new(
            title,
            (PAD, 10),
            (FONT, 20).into_font().color(&BLACK),
        ))?;
        root.draw(&Text::new(
            "each cell: (dp, pp, tp) coordinates; colour: pipeline stage; outline: one TP group",
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
            (x0 + PAD + lc * CELL_W, y0 + PAD + HEADER + lr * CELL_H)
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
                    .map(|l| coordinates(node * gpn + l, plan).1)
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
                let (d, p, t) = coordinates(rank, plan);
                let (x, y) = cell_pos(slot, local);
                root.draw(&Rectangle::new(
                    [(x + 1, y + 1), (x + CELL_W - 1, y + CELL_H - 1)],
                    stage_colour(p).filled(),
                ))?;
                root.draw(&Text::new(
                    format!("({d},{p},{t})"),
                    (x + 5, y + 9),
                    label_font.clone(),
                ))?;
            }
            // TP groups: runs of consecutive local ranks with the same (dp, pp), one outline per
            // run within a cell row.
            let mut local = 0;
            while local < gpn {
                let rank = node * gpn + local;
                let (d, p, _) = coordinates(rank, plan);
                let mut end = local + 1;
                while end < gpn && (end as i32 % per_row) != 0 && {
                    let (d2, p2, _) = coordinates(node * gpn + end, plan);
                    (d2, p2) == (d, p)
                } {
                    end += 1;
                }
                if plan.tp > 1 {
                    let (xa, ya) = cell_pos(slot, local);
                    let (xb, _) = cell_pos(slot, end - 1);
                    root.draw(&Rectangle::new(
                        [(xa, ya), (xb + CELL_W, ya + CELL_H)],
                        BLACK.stroke_width(2),
                    ))?;
                }
                local = end;
            }
        }
        let ly = top + node_rows * (node_h + PAD) + 10;
        let legend = [
            format!(
                "TP groups ({} GPUs, outlined) all-reduce every layer over {}",
                plan.tp,
                link(tp_link)
            ),
            format!(
                "PP: stage s sends activations to stage s+1 (next {} ranks) over {}",
                plan.tp * plan.dp,
                link(pp_link)
            ),
            format!(
                "DP: replicas (same pp, tp; stride {}) reduce gradients over {}",
                plan.tp,
                link(dp_link)
            ),
        ];
        for (i, line) in legend.iter().enumerate() {
            root.draw(&Text::new(
                line.clone(),
                (PAD, ly + 20 * i as i32),
                (FONT, 13).into_font().color(&BLACK),
            ))?;
        }
        if let Some(note) = &folded_note {
            root.draw(&Text::new(
                note.clone(),
                (PAD, ly + 62),
                (FONT, 13).into_font().color(&BLACK),
            ))?;
        }
        Ok(())
    })
}
