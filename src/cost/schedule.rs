//! Cost model: pipeline schedule simulation.
//!
//! Simulates one training step of 1F1B (PipeDream-Flush, Narayanan et al. 2021 §2.2.1) and
//! interleaved 1F1B (Narayanan et al. 2021 §2.2.2; Megatron-LM
//! `forward_backward_pipelining_with_interleaving`) block by block from per-stage compute times,
//! instead of using the closed-form bubble of `pipeline::bubble_ratio`. Pure functions, no I/O.

/// Direction of one block of work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    Forward,
    /// The backward, or under a split backward (`v_schedule`) its input-gradient part.
    Backward,
    /// The weight-gradient part of a split backward (`v_schedule`); the looped schedules have none.
    Weight,
}

/// One forward or backward pass of one micro-batch through one model chunk on one stage.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Block {
    pub stage: u32,
    pub chunk: u32,
    pub microbatch: u32,
    pub direction: Direction,
    pub start_s: f64,
    pub end_s: f64,
}

/// Compute time of one stage, per micro-batch, per model chunk on that stage.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StageCost {
    pub forward_s: f64,
    pub backward_s: f64,
    /// Of `backward_s`, the weight-gradient GEMMs: what a split backward runs as its own block
    /// (`v_schedule`); unused by the looped schedules.
    pub weight_s: f64,
}

/// A simulated step.
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    /// Every block, grouped by stage, each stage's blocks in the order it runs them.
    pub blocks: Vec<Block>,
    /// Latest end of any block.
    pub step_s: f64,
    /// Sum of block durations, per stage.
    pub busy_s: Vec<f64>,
    /// (step_s − busy of the most loaded stage) / busy of the most loaded stage: the simulated
    /// counterpart of the ratio (p − 1)/(v·m).
    pub bubble_ratio: f64,
}

/// Virtual-step index `k` (0..m·v) of one rank → (chunk, micro-batch), following Megatron-LM's
/// `get_model_chunk_id`: steps come in groups of p micro-batches per chunk, chunk = (k / p) mod v,
/// reversed (v − 1 − that) for backwards; the micro-batch is the k-th of its chunk:
/// (k / (p·v))·p + k mod p.
fn virtual_step(k: u32, p: u32, v: u32, direction: Direction) -> (u32, u32) {
    let group = k / p % v;
    let chunk = match direction {
        Direction::Forward => group,
        Direction::Backward | Direction::Weight => v - 1 - group,
    };
    let microbatch = k / (p * v) * p + k % p;
    (chunk, microbatch)
}

/// The order in which one stage (rank) runs its blocks: (chunk, micro-batch, direction).
///
/// - v = 1 (1F1B, Narayanan et al. 2021 §2.2.1; Megatron-LM
///   `forward_backward_pipelining_without_interleaving`): min(p − 1 − rank, m) warm-up forwards,
///   then one forward one backward until all m forwards are issued, then the cool-down backwards;
///   micro-batches in order.
/// - v > 1 (interleaved, §2.2.2; Megatron-LM `forward_backward_pipelining_with_interleaving`):
///   warm-up = (p − rank − 1)·2 + (v − 1)·p forwards, capped at m·v; then 1F1B over the m·v virtual
///   steps; chunks and micro-batches per virtual step as in [`virtual_step`]. Precondition m % p == 0
///   (Megatron asserts it); [`simulate`] checks it.
pub fn stage_order(rank: u32, p: u32, v: u32, m: u32) -> Vec<(u32, u32, Direction)> {
    let total = m * v;
    let warmup = if v == 1 {
        (p - 1 - rank).min(m)
    } else {
        ((p - rank - 1) * 2 + (v - 1) * p).min(total)
    };
    let block = |k: u32, d: Direction| {
        let (c, i) = virtual_step(k, p, v, d);
        (c, i, d)
    };
    let mut order = Vec::with_capacity(2 * total as usize);
    for k in 0..warmup {
        order.push(block(k, Direction::Forward));
    }
    for k in 0..total - warmup {
        order.push(block(warmup + k, Direction::Forward));
        order.push(block(k, Direction::Backward));
    }
    for k in total - warmup..total {
        order.push(block(k, Direction::Backward));
    }
    order
}

/// The block a block waits for, on the virtual pipeline of p·v stages (stage s chunk c is virtual
/// stage c·p + s; Narayanan et al. 2021 §2.2.2). Forward: the same micro-batch's forward on the
/// previous virtual stage. Backward: the backward on the next virtual stage; the last virtual
/// stage's backward waits for its own forward (the loss). `None` for the first virtual stage's forward.
fn dependency(
    stage: u32,
    chunk: u32,
    direction: Direction,
    p: u32,
    v: u32,
) -> Option<(u32, u32, Direction)> {
    let virt = chunk * p + stage;
    match direction {
        Direction::Forward if virt == 0 => None,
        Direction::Forward => Some(((virt - 1) % p, (virt - 1) / p, Direction::Forward)),
        Direction::Backward if virt == p * v - 1 => Some((stage, chunk, Direction::Forward)),
        Direction::Backward => Some(((virt + 1) % p, (virt + 1) / p, Direction::Backward)),
        Direction::Weight => Some((stage, chunk, Direction::Backward)),
    }
}

impl Schedule {
    /// The schedule each stage's blocks make, in the order each ran them: the step ends with the
    /// last block, each stage's busy time is its blocks' sum, and the bubble ratio is the most
    /// loaded stage's idle over its busy time.
    pub fn of_stages(per_stage: Vec<Vec<Block>>) -> Schedule {
        let busy_s: Vec<f64> = per_stage
            .iter()
            .map(|b| b.iter().map(|b| b.end_s - b.start_s).sum())
            .collect();
        let step_s = per_stage
            .iter()
            .flat_map(|b| b.last())
            .map(|b| b.end_s)
            .fold(0.0, f64::max);
        let max_busy = busy_s.iter().copied().fold(0.0, f64::max);
        let bubble_ratio = if max_busy > 0.0 {
            (step_s - max_busy) / max_busy
        } else {
            0.0
        };
        Schedule {
            blocks: per_stage.into_iter().flatten().collect(),
            step_s,
            busy_s,
            bubble_ratio,
        }
    }

    /// `runs` copies of this schedule back to back, as PyTorch's pipelining runs one schedule per
    /// gradient-accumulation step (each fills and drains again): block times shifted by one run's
    /// length and micro-batches numbered on, blocks still grouped by stage; the bubble ratio is one
    /// run's.
    pub fn repeated(&self, runs: u32, microbatches_per_run: u32) -> Schedule {
        let runs = runs.max(1);
        let mut blocks = Vec::with_capacity(self.blocks.len() * runs as usize);
        // Stages may run different numbers of blocks (DualPipeV's full backwards).
        for stage_blocks in self.blocks.chunk_by(|a, b| a.stage == b.stage) {
            for run in 0..runs {
                let shift = f64::from(run) * self.step_s;
                blocks.extend(stage_blocks.iter().map(|b| Block {
                    microbatch: b.microbatch + run * microbatches_per_run,
                    start_s: b.start_s + shift,
                    end_s: b.end_s + shift,
                    ..*b
                }));
            }
        }
        Schedule {
            blocks,
            step_s: f64::from(runs) * self.step_s,
            busy_s: self.busy_s.iter().map(|b| f64::from(runs) * b).collect(),
            bubble_ratio: self.bubble_ratio,
        }
    }
}

/// Most blocks (a forward or backward of one chunk and micro-batch on one stage) one step may hold
/// for the simulation: about 4.2 million, some 250 MB of blocks and end times, a fraction of a
/// second to run. Larger schedules (thousands of stages times thousands of micro-batches) keep the
/// closed form's step time, (p − 1)/(v·m) of bubble, which the simulation equals for equal stages.
pub const MAX_SIMULATED_BLOCKS: u64 = 1 << 22;

/// Blocks of `runs` schedules of p stages, v chunks and m micro-batches: 2·p·v·m·runs, in u64
/// (the product overflows u32 at sizes the command line accepts).
pub fn schedule_blocks(p: u32, v: u32, m: u32, runs: u32) -> u64 {
    2 * u64::from(p) * u64::from(v) * u64::from(m) * u64::from(runs)
}

/// Simulates one step with every model chunk of a stage at that stage's cost
/// ([`simulate_chunks`] with the stage's cost repeated over its `v` chunks).
pub fn simulate(stages: &[StageCost], v: u32, m: u32, p2p_s: f64) -> Result<Schedule, String> {
    let p = u32::try_from(stages.len()).map_err(|_| "too many stages".to_string())?;
    if schedule_blocks(p, v, m, 1) > MAX_SIMULATED_BLOCKS {
        // Refused by `simulate_chunks` before it allocates; no chunk list to build either.
        return simulate_chunks(&[], stages.len(), v, m, p2p_s);
    }
    let chunks: Vec<StageCost> = stages
        .iter()
        .flat_map(|cost| std::iter::repeat_n(*cost, v as usize))
        .collect();
    simulate_chunks(&chunks, stages.len(), v, m, p2p_s)
}

/// Simulates one step: each stage runs its blocks strictly in [`stage_order`], one at a time; a block
/// starts at max(stage free, dependency end + p2p_s), with p2p_s paid only when the dependency ran on
/// another stage (a send between adjacent stages; none for a stage's own forward before the loss, or
/// for p = 1). `chunks` holds the cost of every model chunk, stage by stage (`chunks[s·v + c]`
/// is chunk c of stage s, virtual stage c·p + s): chunks of one stage may differ (unequal layers,
/// the output layer in the last virtual stage). `p` stages, `v` chunks per stage, `m` micro-batches.
///
/// Errors when p = 0, v = 0, m = 0, `chunks` is not p·v long, v > 1 with m % p != 0 (Megatron's
/// precondition), or if the orders deadlock (they do not for valid inputs).
pub fn simulate_chunks(
    chunks: &[StageCost],
    stages: usize,
    v: u32,
    m: u32,
    p2p_s: f64,
) -> Result<Schedule, String> {
    let p = u32::try_from(stages).map_err(|_| "too many stages".to_string())?;
    if p == 0 || v == 0 || m == 0 {
        return Err(format!("need p, v, m ≥ 1 (p = {p}, v = {v}, m = {m})"));
    }
    let blocks = schedule_blocks(p, v, m, 1);
    if blocks > MAX_SIMULATED_BLOCKS {
        return Err(format!(
            "{blocks} blocks, more than the {MAX_SIMULATED_BLOCKS} simulated"
        ));
    }
    if chunks.len() != stages * v as usize {
        return Err(format!(
            "{} chunk costs for {p} stages of {v} chunks",
            chunks.len()
        ));
    }
    if v > 1 && !m.is_multiple_of(p) {
        return Err(format!(
            "interleaved schedule needs m divisible by p (m = {m}, p = {p})"
        ));
    }
    let orders: Vec<_> = (0..p).map(|r| stage_order(r, p, v, m)).collect();
    // End time of each (stage, chunk, micro-batch, direction), NaN until it has run.
    let (vu, mu) = (v as usize, m as usize);
    let index = |s: u32, c: u32, i: u32, d: Direction| {
        ((s as usize * vu + c as usize) * mu + i as usize) * 2
            + usize::from(d == Direction::Backward)
    };
    let mut done = vec![f64::NAN; blocks as usize];
    let mut next = vec![0usize; p as usize];
    let mut free = vec![0.0f64; p as usize];
    let mut per_stage: Vec<Vec<Block>> =
        orders.iter().map(|o| Vec::with_capacity(o.len())).collect();
    let total: usize = orders.iter().map(Vec::len).sum();
    let mut scheduled = 0;
    // Start times depend only on the per-stage orders and the dependencies, so sweeping the stages
    // and running every block whose dependency has finished gives the event-driven result.
    while scheduled < total {
        let mut progress = false;
        for s in 0..p {
            let su = s as usize;
            while let Some(&(c, i, d)) = orders[su].get(next[su]) {
                let ready = match dependency(s, c, d, p, v) {
                    None => 0.0,
                    Some((ds, dc, dd)) => {
                        let end = done[index(ds, dc, i, dd)];
                        if end.is_nan() {
                            break;
                        }
                        end + if ds == s { 0.0 } else { p2p_s }
                    }
                };
                let cost = &chunks[su * vu + c as usize];
                let duration = match d {
                    Direction::Forward => cost.forward_s,
                    Direction::Backward => cost.backward_s,
                    Direction::Weight => 0.0,
                };
                let start_s = free[su].max(ready);
                let end_s = start_s + duration;
                done[index(s, c, i, d)] = end_s;
                free[su] = end_s;
                per_stage[su].push(Block {
                    stage: s,
                    chunk: c,
                    microbatch: i,
                    direction: d,
                    start_s,
                    end_s,
                });
                next[su] += 1;
                scheduled += 1;
                progress = true;
            }
        }
        if !progress {
            return Err("pipeline schedule deadlocked".to_string());
        }
    }
    Ok(Schedule::of_stages(per_stage))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    const EQUAL: StageCost = StageCost {
        forward_s: 1.0,
        backward_s: 2.0,
        weight_s: 1.0,
    };

    fn cases() -> Vec<(u32, u32, u32)> {
        let mut out = Vec::new();
        for p in [2, 4, 8] {
            for m in [p, 2 * p, 4 * p, 8 * p] {
                for v in [1, 2, 4] {
                    out.push((p, m, v));
                }
            }
        }
        out
    }

    #[test]
    fn equal_stages_match_narayanan_bubble() {
        for (p, m, v) in cases() {
            let s = simulate(&vec![EQUAL; p as usize], v, m, 0.0).unwrap();
            let want = f64::from(p - 1) / f64::from(v * m);
            assert!(
                (s.bubble_ratio - want).abs() <= 1e-9 * want,
                "p={p} m={m} v={v}: {} vs {want}",
                s.bubble_ratio
            );
        }
    }

    #[test]
    fn slow_stage_lengthens_step() {
        let (p, m) = (4u32, 16u32);
        let mut stages = vec![EQUAL; p as usize];
        stages[2] = StageCost {
            forward_s: 1.5,
            backward_s: 3.0,
            weight_s: 1.5,
        };
        let slow = simulate(&stages, 1, m, 0.0).unwrap();
        let equal = simulate(&vec![EQUAL; p as usize], 1, m, 0.0).unwrap();
        // Lower bound: the upstream stages' forwards fill (2 × 1.0), the slow stage is busy
        // m·(1.5 + 3.0), the upstream backwards drain (2 × 2.0). The stage after the slow one
        // overlaps with it, so (p − 1)·(1 + 2) is not a lower bound.
        let bound = 2.0 * 1.0 + f64::from(m) * 4.5 + 2.0 * 2.0;
        assert!(slow.step_s >= bound - 1e-9, "{} < {bound}", slow.step_s);
        // Exact by hand: stage 2 runs F0 F1 B0 …; B0 waits for stage 3's F0 + B0 (3.0) while only
        // F1 (1.5) fills, one stall of 1.5; afterwards B(i−1) + F(i+1) = 4.5 ≥ 3.0 hides it.
        assert!(
            (slow.step_s - (bound + 1.5)).abs() < 1e-9,
            "{}",
            slow.step_s
        );
        assert!(slow.step_s > equal.step_s);
    }

    #[test]
    fn one_f_one_b_order() {
        let (p, m) = (4u32, 8u32);
        use Direction::{Backward as B, Forward as F};
        let r0 = stage_order(0, p, 1, m);
        assert_eq!(&r0[..4], &[(0, 0, F), (0, 1, F), (0, 2, F), (0, 3, F)]);
        assert_eq!(r0[4], (0, 0, B));
        let r3 = stage_order(3, p, 1, m);
        assert_eq!(&r3[..4], &[(0, 0, F), (0, 0, B), (0, 1, F), (0, 1, B)]);
        for r in 0..p {
            let o = stage_order(r, p, 1, m);
            let fw: Vec<u32> = o.iter().filter(|b| b.2 == F).map(|b| b.1).collect();
            let bw: Vec<u32> = o.iter().filter(|b| b.2 == B).map(|b| b.1).collect();
            assert_eq!(fw, (0..m).collect::<Vec<_>>());
            assert_eq!(bw, (0..m).collect::<Vec<_>>());
            assert_eq!(o.last().unwrap().2, B);
            // Warm-up length p − 1 − r.
            let warm = o.iter().take_while(|b| b.2 == F).count();
            assert_eq!(warm, (p - 1 - r) as usize + 1);
        }
    }

    #[test]
    fn dependencies_respected() {
        let p2p = 0.1;
        for (p, m, v) in cases() {
            let stages: Vec<StageCost> = (0..p)
                .map(|s| StageCost {
                    forward_s: 1.0 + 0.1 * f64::from(s),
                    backward_s: 2.0 + 0.3 * f64::from(s % 2),
                    weight_s: 1.0,
                })
                .collect();
            let s = simulate(&stages, v, m, p2p).unwrap();
            let by_key: HashMap<_, _> = s
                .blocks
                .iter()
                .map(|b| ((b.stage, b.chunk, b.microbatch, b.direction), *b))
                .collect();
            for b in &s.blocks {
                let virt = b.chunk * p + b.stage;
                let need = match b.direction {
                    Direction::Forward if virt == 0 => None,
                    Direction::Forward => {
                        Some(((virt - 1) % p, (virt - 1) / p, Direction::Forward))
                    }
                    Direction::Backward if virt == p * v - 1 => {
                        Some((b.stage, b.chunk, Direction::Forward))
                    }
                    Direction::Backward => {
                        Some(((virt + 1) % p, (virt + 1) / p, Direction::Backward))
                    }
                    Direction::Weight => unreachable!("looped schedules run no weight blocks"),
                };
                if let Some((ds, dc, dd)) = need {
                    let dep = by_key[&(ds, dc, b.microbatch, dd)];
                    let lag = if ds == b.stage { 0.0 } else { p2p };
                    assert!(
                        b.start_s >= dep.end_s + lag - 1e-9,
                        "p={p} m={m} v={v}: {b:?} starts before {dep:?}"
                    );
                }
            }
            // One block at a time per stage.
            for st in 0..p {
                let mine: Vec<_> = s.blocks.iter().filter(|b| b.stage == st).collect();
                for w in mine.windows(2) {
                    assert!(w[1].start_s >= w[0].end_s - 1e-12);
                }
            }
        }
    }

    #[test]
    fn one_block_each() {
        for (p, m, v) in cases() {
            let s = simulate(&vec![EQUAL; p as usize], v, m, 0.0).unwrap();
            assert_eq!(s.blocks.len(), (2 * p * v * m) as usize);
            let mut keys: Vec<_> = s
                .blocks
                .iter()
                .map(|b| {
                    (
                        b.stage,
                        b.chunk,
                        b.microbatch,
                        b.direction == Direction::Backward,
                    )
                })
                .collect();
            keys.sort();
            keys.dedup();
            assert_eq!(keys.len(), s.blocks.len());
            for b in &s.blocks {
                assert!(b.chunk < v && b.microbatch < m && b.stage < p);
            }
        }
    }

    #[test]
    fn interleaved_needs_divisible_m() {
        assert!(simulate(&[EQUAL; 4], 2, 6, 0.0).is_err());
        // Two schedules of 4 micro-batches back to back: twice the time of one (two fills and
        // drains), so more than one schedule of 8.
        let one = simulate(&[EQUAL; 4], 1, 4, 0.0).unwrap();
        let twice = one.repeated(2, 4);
        let eight = simulate(&[EQUAL; 4], 1, 8, 0.0).unwrap();
        assert!((twice.step_s - 2.0 * one.step_s).abs() < 1e-12);
        assert!(twice.step_s > eight.step_s + 1e-9);
        assert_eq!(twice.blocks.len(), eight.blocks.len());
        assert!((twice.busy_s[0] - eight.busy_s[0]).abs() < 1e-12);
        // Grouped by stage, each stage's second run after its first.
        let per_stage = twice.blocks.len() / 4;
        let stage0 = &twice.blocks[..per_stage];
        assert!(stage0.iter().all(|b| b.stage == 0));
        assert!(stage0.windows(2).all(|w| w[0].start_s <= w[1].start_s));
        assert_eq!(stage0.iter().map(|b| b.microbatch).max(), Some(7));
        assert!(simulate(&[EQUAL; 4], 1, 6, 0.0).is_ok());
    }
}
