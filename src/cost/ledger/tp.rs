//! The TP rows: Megatron's column-then-row split (Shoeybi et al. 2019 §3, Fig. 4): the row-split
//! attention output projection and MLP second GEMM end in an all-reduce (`g`) in forward; the
//! column-split QKV and MLP first GEMM start with an identity whose backward all-reduces the input
//! gradient (`f`). With sequence parallelism each all-reduce becomes an all-gather before the
//! column split and a reduce-scatter after the row split, and backward swaps them (Korthikanti et
//! al. 2022 §4.2.2, Fig. 5); the volume is the same. Full recompute repeats the forward pair
//! (§4.1), on the recomputed share of the layers (`ParallelPlan::recompute_share`, Megatron's
//! block recompute); selective recompute repeats only the attention core, which issues no
//! collective (§5).

use super::hybrid::hybrid_site;
use super::{Op, Pass, Rows, Scope, Step, recomputed};
use crate::cost::comm;
use crate::cost::embedding_output_tp::{ModelEnd, for_each_end_collective};
use crate::cost::groups::GroupKind;
use crate::cost::moe;
use crate::model::Model;
use crate::plan::{ParallelPlan, Recompute};
use crate::training::Training;

/// The slowest stage's layers as the TP collectives count them: all of them at the plan's
/// precision, or, where some are kept in bf16, the others and those apart.
struct TpPart {
    /// Layers of the stage in this part (fractional where the stage's mix is split).
    layers: f64,
    mix: crate::cost::LayerMix,
    gather_scale: comm::SpGatherScale,
    bf16: bool,
}

/// [`TpPart`]s of the slowest stage (`layers` layers of `mix`, `bf16` of them in bf16): the part
/// at the plan's precision holds the stage's block counts less the bf16 layers', so that the two
/// sum to what `cost::with_bf16_layers` prices.
fn tp_parts(
    model: &Model,
    training: &Training,
    plan: &ParallelPlan,
    mix: crate::cost::LayerMix,
    layers: u32,
    bf16: Option<crate::cost::pipeline::Bf16Run>,
) -> Vec<TpPart> {
    let whole = TpPart {
        layers: f64::from(layers),
        mix,
        gather_scale: comm::sp_gather_scale(training, plan),
        bf16: false,
    };
    let Some(b) = bf16.filter(|b| b.layers > 0 && plan.precision != crate::plan::Precision::Bf16)
    else {
        return vec![whole];
    };
    let part = crate::cost::LayerMix::of(model, b.layers, b.moe_layers, b.run);
    let (n, nb) = (f64::from(layers), f64::from(b.layers.min(layers)));
    let rest = n - nb;
    // The other layers' shares: the stage's totals less the bf16 layers', over what remains.
    let less = |all: f64, of_part: f64| {
        if rest > 0.0 {
            (n * all - nb * of_part) / rest
        } else {
            0.0
        }
    };
    let rest_mix = crate::cost::LayerMix {
        moe_share: less(mix.moe_share, part.moe_share),
        blocks: crate::model::BlockShares {
            attention: less(mix.blocks.attention, part.blocks.attention),
            mlp: less(mix.blocks.mlp, part.blocks.mlp),
            mamba: less(mix.blocks.mamba, part.blocks.mamba),
            norms: less(mix.blocks.norms, part.blocks.norms),
        },
        ..mix
    };
    let bf16_plan = ParallelPlan {
        precision: crate::plan::Precision::Bf16,
        ..*plan
    };
    vec![
        TpPart {
            layers: rest,
            mix: rest_mix,
            ..whole
        },
        TpPart {
            layers: nb,
            mix: part,
            gather_scale: comm::sp_gather_scale(training, &bf16_plan),
            bf16: true,
        },
    ]
}

/// A collective and where in the layer it runs.
type Site = (Op, &'static str);

/// Pushes the TP rows of the slowest stage's layers.
pub(super) fn rows(rows: &mut Rows, step: &Step) {
    let Step {
        model,
        training,
        plan,
        m,
        slowest_layers,
        slowest_mix,
        slowest_bf16,
        ..
    } = *step;
    // TP, per layer per micro-batch, on the slowest stage: its layers at the plan's precision and,
    // apart, those kept in bf16 (`pipeline::Bf16Keep`), whose sequence-parallel all-gathers carry
    // bf16 (`cost::with_bf16_layers` prices them so).
    for part in tp_parts(
        model,
        training,
        plan,
        slowest_mix,
        slowest_layers,
        slowest_bf16,
    ) {
        if plan.tp <= 1 || part.layers <= 0.0 {
            continue;
        }
        rows.on_bf16_layers = part.bf16;
        let slowest_mix = part.mix;
        let slowest_blocks = part.mix.blocks;
        let slowest_moe_share = part.mix.moe_share;
        let tensor = comm::tp_tensor_bytes(model, training, plan);
        let count = part.layers * m;
        let scope = Scope::PerLayerPerMicrobatch;
        let t = plan.tp;
        // torchtitan's per-op selective AC runs the all-gathers (or all-reduces) again, not the
        // reduce-scatters, whose outputs it saves (`SelectiveRecompute::AlternateMatmuls`).
        let per_op_sac = training.per_op_sac(plan.recompute);
        // The forward pair's collectives, the attention's then the MLP's: with sequence
        // parallelism an all-gather before each column-split GEMM and a reduce-scatter after each
        // row-split one, without it an all-reduce after each row-split GEMM.
        let (attention_sites, mlp_sites): (&[Site], &[Site]) = if plan.sequence_parallel {
            (
                &[
                    (
                        Op::AllGather,
                        "before attention QKV (column split): gather the sequence-split input",
                    ),
                    (
                        Op::ReduceScatter,
                        "after attention output projection (row split): sum partial outputs, split by sequence",
                    ),
                ],
                &[
                    (
                        Op::AllGather,
                        "before MLP first GEMM (column split): gather the sequence-split input",
                    ),
                    (
                        Op::ReduceScatter,
                        "after MLP second GEMM (row split): sum partial outputs, split by sequence",
                    ),
                ],
            )
        } else {
            (
                &[(
                    Op::AllReduce,
                    "after attention output projection (row split): sum partial outputs",
                )],
                &[(
                    Op::AllReduce,
                    "after MLP second GEMM (row split): sum partial outputs",
                )],
            )
        };
        // The MLP side's collectives run on the layers whose MLP has them (`moe::
        // mlp_tp_pair_share_at`: Megatron-Core's MoE layers without shared experts have none).
        // A hybrid stack's layer holds each block's share (`LayerMix::blocks`, the slowest
        // stage's): its attention and Mamba blocks each run one column- then row-parallel pair, at
        // the attention's sites.
        let shares = slowest_blocks;
        let mlp_share =
            shares.mlp - 1.0 + moe::mlp_tp_pair_share_at(model, training, slowest_moe_share);
        let attention_share = shares.attention + shares.mamba;
        let site_of = |site: &'static str| {
            if model.is_hybrid() {
                hybrid_site(site)
            } else {
                site
            }
        };
        // Low-precision training all-gathers quantized copies under sequence parallelism
        // (`comm::sp_gather_scale`); the reduce-scatters carry bf16.
        let gather_scale = part.gather_scale;
        let forward_tensor = |op: Op| {
            if op == Op::AllGather {
                gather_scale.forward * tensor
            } else {
                tensor
            }
        };
        let mut forward_pair = |pass: Pass| {
            let count = match (pass, plan.recompute) {
                (Pass::Recompute, Recompute::Full) => recomputed(count, plan),
                _ => count,
            };
            let sites = attention_sites
                .iter()
                .map(|s| (s, count * attention_share))
                .chain(mlp_sites.iter().map(|s| (s, count * mlp_share)));
            for (&(op, site), count) in sites {
                let site = site_of(site);
                if pass == Pass::Recompute && per_op_sac && op == Op::ReduceScatter {
                    continue;
                }
                if count > 0.0 {
                    rows.push(
                        GroupKind::Tp,
                        op,
                        pass,
                        site,
                        scope,
                        count,
                        t,
                        forward_tensor(op),
                    );
                }
            }
        };
        forward_pair(Pass::Forward);
        if plan.recompute == Recompute::Full || per_op_sac {
            forward_pair(Pass::Recompute);
        }
        // `--recompute-modules mlp` / `moe` run the dense / MoE layers' MLP again, its
        // collectives with it.
        if let Some(modules) = crate::cost::recomputed_modules(training, plan) {
            let repeats = modules.mlp_pair_repeats(
                slowest_mix.dense_mlp_share(),
                slowest_moe_share,
                moe::moe_mlp_has_tp_pair(model, training),
            );
            let mlp_count = count * repeats;
            if mlp_count > 0.0 {
                for &(op, site) in mlp_sites {
                    rows.push(
                        GroupKind::Tp,
                        op,
                        Pass::Recompute,
                        site,
                        scope,
                        mlp_count,
                        t,
                        forward_tensor(op),
                    );
                }
            }
        }
        let mlp_count = count * mlp_share;
        let regather_count = if training.framework.sp_keeps_gathered_inputs() {
            0.0
        } else {
            count
        };
        let attention_count = count * attention_share;
        if plan.sequence_parallel {
            for (op, site, count, scale) in [
                (
                    Op::ReduceScatter,
                    site_of("attention QKV input gradient (conjugate of the all-gather)"),
                    attention_count,
                    1.0,
                ),
                (
                    Op::AllGather,
                    site_of("attention output gradient (conjugate of the reduce-scatter)"),
                    attention_count,
                    gather_scale.grad,
                ),
                (
                    Op::ReduceScatter,
                    "MLP first GEMM input gradient (conjugate of the all-gather)",
                    mlp_count,
                    1.0,
                ),
                (
                    Op::AllGather,
                    "MLP output gradient (conjugate of the reduce-scatter)",
                    mlp_count,
                    gather_scale.grad,
                ),
                // Megatron re-gathers the column-parallel inputs it kept as sequence shards, for
                // the weight gradients (`regathers` in `cost::unit_costs`); torchtitan kept them.
                (
                    Op::AllGather,
                    site_of(
                        "attention QKV input again, for its weight gradient (the forward kept the sequence shard)",
                    ),
                    regather_count * attention_share,
                    gather_scale.regather,
                ),
                (
                    Op::AllGather,
                    "MLP first GEMM input again, for its weight gradient (the forward kept the sequence shard)",
                    regather_count * mlp_share,
                    gather_scale.regather,
                ),
            ] {
                if count > 0.0 {
                    rows.push(
                        GroupKind::Tp,
                        op,
                        Pass::Backward,
                        site,
                        scope,
                        count,
                        t,
                        scale * tensor,
                    );
                }
            }
        } else {
            for (site, count) in [
                (
                    site_of("attention QKV input gradient (column split, Megatron's f)"),
                    attention_count,
                ),
                (
                    "MLP first GEMM input gradient (column split, Megatron's f)",
                    mlp_count,
                ),
            ] {
                if count > 0.0 {
                    rows.push(
                        GroupKind::Tp,
                        Op::AllReduce,
                        Pass::Backward,
                        site,
                        scope,
                        count,
                        t,
                        tensor,
                    );
                }
            }
        }
    }

    rows.on_bf16_layers = false;
}

/// Pushes the TP rows of the model's ends the slowest stage runs (`embedding_output_tp`), once
/// per micro-batch each.
pub(super) fn end_rows(rows: &mut Rows, step: &Step) {
    let Step {
        model,
        training,
        plan,
        m,
        slowest_ends,
        ..
    } = *step;
    let tp_overlap = crate::cost::overlap::tp_overlap_on(training, plan);
    for_each_end_collective(model, training, plan, tp_overlap, |c| {
        let held = match c.end {
            ModelEnd::Embedding => slowest_ends.embedding,
            ModelEnd::Output => slowest_ends.output,
        };
        if held {
            rows.push(
                GroupKind::Tp,
                Op::of(c.collective),
                c.pass,
                c.site,
                Scope::PerMicrobatch,
                c.count * m,
                plan.tp,
                c.tensor_bytes,
            );
        }
    });
}
