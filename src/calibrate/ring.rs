//! Shared-memory ring collectives among CPU ranks (one thread each), with real data movement and
//! every byte counted.
//!
//! The ring algorithms are NCCL's (Patarasuk & Yuan 2009; nccl-tests `doc/PERFORMANCE.md`): a
//! reduce-scatter and an all-gather are n − 1 steps in which each rank sends one chunk of S/n to
//! its right neighbour; an all-reduce is a reduce-scatter followed by an all-gather. So each rank
//! sends (n−1)/n·S, 2(n−1)/n·S for the all-reduce — exactly `cost::comm::Collective::wire_factor`.
//! Data travels as bf16, as activations do in the cost model (`cost::comm::ACTIVATION_BYTES`);
//! sums are taken in the rank's own precision and rounded to bf16 when sent, as NCCL does for a bf16
//! reduction.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Barrier, Mutex};

use half::bf16;

/// Element types the CPU ranks compute in.
pub trait Real:
    Copy
    + Send
    + Sync
    + 'static
    + PartialOrd
    + std::ops::Add<Output = Self>
    + std::ops::Sub<Output = Self>
    + std::ops::Mul<Output = Self>
    + std::ops::Div<Output = Self>
    + std::ops::AddAssign
{
    const ZERO: Self;
    const ONE: Self;
    fn from_f64(v: f64) -> Self;
    fn to_f64(self) -> f64;
    fn exp(self) -> Self;
    fn to_wire(self) -> bf16 {
        bf16::from_f64(self.to_f64())
    }
    fn from_wire(w: bf16) -> Self {
        Self::from_f64(w.to_f64())
    }
}

impl Real for f32 {
    const ZERO: f32 = 0.0;
    const ONE: f32 = 1.0;
    fn from_f64(v: f64) -> f32 {
        v as f32
    }
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
    fn exp(self) -> f32 {
        f32::exp(self)
    }
    fn to_wire(self) -> bf16 {
        bf16::from_f32(self)
    }
    fn from_wire(w: bf16) -> f32 {
        w.to_f32()
    }
}

impl Real for f64 {
    const ZERO: f64 = 0.0;
    const ONE: f64 = 1.0;
    fn from_f64(v: f64) -> f64 {
        v
    }
    fn to_f64(self) -> f64 {
        self
    }
    fn exp(self) -> f64 {
        f64::exp(self)
    }
}

/// Bytes of one element on the wire (bf16).
pub const WIRE_ELEMENT_BYTES: u64 = 2;

/// A ring of `n` ranks. Each rank has two inboxes (double buffering: the step's parity), written by
/// its left neighbour; one barrier per step orders the writes before the reads.
pub struct Ring {
    n: usize,
    inbox: Vec<[Mutex<Vec<bf16>>; 2]>,
    barrier: Barrier,
    sent: Vec<AtomicU64>,
    /// Steps each rank has taken, across collectives: its parity picks the inbox, so two
    /// consecutive steps never share one whatever collective they belong to.
    steps: Vec<AtomicU64>,
}

/// Start and end of chunk `i` of a `len`-element buffer cut in `n` (sizes differ by at most one).
pub fn chunk(len: usize, n: usize, i: usize) -> std::ops::Range<usize> {
    (i * len / n)..((i + 1) * len / n)
}

impl Ring {
    pub fn new(n: usize) -> Ring {
        Ring {
            n,
            inbox: (0..n)
                .map(|_| [Mutex::new(Vec::new()), Mutex::new(Vec::new())])
                .collect(),
            barrier: Barrier::new(n),
            sent: (0..n).map(|_| AtomicU64::new(0)).collect(),
            steps: (0..n).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    pub fn ranks(&self) -> usize {
        self.n
    }

    /// Bytes rank `rank` has sent since the last `reset_counts`.
    pub fn sent_bytes(&self, rank: usize) -> u64 {
        self.sent[rank].load(Ordering::Relaxed)
    }

    pub fn reset_counts(&self) {
        for s in &self.sent {
            s.store(0, Ordering::Relaxed);
        }
    }

    /// All ranks wait here (used to line up timings).
    pub fn barrier(&self) {
        self.barrier.wait();
    }

    fn lock(&self, rank: usize, parity: usize) -> std::sync::MutexGuard<'_, Vec<bf16>> {
        // A poisoned inbox means another rank panicked; its data is still a plain Vec.
        self.inbox[rank][parity]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// The inbox parity of this rank's next step.
    fn next_parity(&self, rank: usize) -> usize {
        (self.steps[rank].fetch_add(1, Ordering::Relaxed) % 2) as usize
    }

    /// One ring step: send `data` to the right neighbour, then receive from the left into `into`.
    /// A rank writes parity p of its neighbour's inbox only after the barrier of the previous step
    /// (parity 1 − p), which the neighbour passes only after reading parity p two steps back.
    fn step<T: Real>(&self, rank: usize, data: &[T], into: &mut Vec<bf16>) {
        let parity = self.next_parity(rank);
        let right = (rank + 1) % self.n;
        {
            let mut slot = self.lock(right, parity);
            slot.clear();
            slot.extend(data.iter().map(|v| v.to_wire()));
        }
        self.sent[rank].fetch_add(data.len() as u64 * WIRE_ELEMENT_BYTES, Ordering::Relaxed);
        self.barrier.wait();
        into.clear();
        into.extend_from_slice(&self.lock(rank, parity));
    }

    /// Ring reduce-scatter in place: afterwards `buf[chunk(rank)]` holds the sum over ranks
    /// (rounded to bf16); the rest of `buf` is scratch.
    pub fn reduce_scatter_in_place<T: Real>(&self, rank: usize, buf: &mut [T]) {
        let n = self.n;
        if n == 1 {
            return;
        }
        let len = buf.len();
        let mut received = Vec::new();
        for s in 0..n - 1 {
            let send = chunk(len, n, (rank + 2 * n - s - 1) % n);
            let recv = chunk(len, n, (rank + 2 * n - s - 2) % n);
            self.step(rank, &buf[send], &mut received);
            for (dst, w) in buf[recv].iter_mut().zip(&received) {
                *dst += T::from_wire(*w);
            }
        }
        for v in &mut buf[chunk(len, n, rank)] {
            *v = T::from_wire(v.to_wire());
        }
    }

    /// Ring all-gather in place: `buf[chunk(rank)]` is this rank's part; afterwards every chunk is
    /// filled (all rounded to bf16, so every rank holds identical data).
    pub fn all_gather_in_place<T: Real>(&self, rank: usize, buf: &mut [T]) {
        let n = self.n;
        if n == 1 {
            return;
        }
        let len = buf.len();
        for v in &mut buf[chunk(len, n, rank)] {
            *v = T::from_wire(v.to_wire());
        }
        let mut received = Vec::new();
        for s in 0..n - 1 {
            let send = chunk(len, n, (rank + n - s) % n);
            let recv = chunk(len, n, (rank + 2 * n - s - 1) % n);
            self.step(rank, &buf[send], &mut received);
            for (dst, w) in buf[recv].iter_mut().zip(&received) {
                *dst = T::from_wire(*w);
            }
        }
    }

    /// Ring all-reduce: reduce-scatter, then all-gather (Patarasuk & Yuan 2009).
    pub fn all_reduce<T: Real>(&self, rank: usize, buf: &mut [T]) {
        self.reduce_scatter_in_place(rank, buf);
        self.all_gather_in_place(rank, buf);
    }

    /// Reduce-scatter of a full-size `input` into this rank's chunk `out`.
    pub fn reduce_scatter<T: Real>(&self, rank: usize, input: &mut [T], out: &mut [T]) {
        self.reduce_scatter_in_place(rank, input);
        out.copy_from_slice(&input[chunk(input.len(), self.n, rank)]);
    }

    /// All-gather of this rank's `part` into the full-size `out`.
    pub fn all_gather<T: Real>(&self, rank: usize, part: &[T], out: &mut [T]) {
        let range = chunk(out.len(), self.n, rank);
        out[range].copy_from_slice(part);
        self.all_gather_in_place(rank, out);
    }

    /// Rank 0 sends `buf` to rank 1 (a pipeline send/recv); the other ranks only keep step.
    pub fn send_recv<T: Real>(&self, rank: usize, buf: &mut [T]) {
        if self.n < 2 {
            return;
        }
        let parity = self.next_parity(rank);
        if rank == 0 {
            {
                let mut slot = self.lock(1, parity);
                slot.clear();
                slot.extend(buf.iter().map(|v| v.to_wire()));
            }
            self.sent[0].fetch_add(buf.len() as u64 * WIRE_ELEMENT_BYTES, Ordering::Relaxed);
        }
        self.barrier.wait();
        if rank == 1 {
            let slot = self.lock(1, parity);
            for (dst, w) in buf.iter_mut().zip(slot.iter()) {
                *dst = T::from_wire(*w);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_ranks(n: usize, f: impl Fn(usize) + Sync) {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build()
            .unwrap();
        pool.broadcast(|ctx| f(ctx.index()));
    }

    #[test]
    fn ring_all_reduce_sums_exactly_and_sends_the_nccl_volume() {
        for n in [2, 3, 4] {
            let ring = Ring::new(n);
            let len = 24;
            let results: Vec<Mutex<Vec<f32>>> = (0..n).map(|_| Mutex::new(Vec::new())).collect();
            run_ranks(n, |rank| {
                // Small integers are exact in bf16, so the sum must be exact.
                let mut buf: Vec<f32> = (0..len).map(|i| (i + rank) as f32).collect();
                ring.all_reduce(rank, &mut buf);
                *results[rank].lock().unwrap() = buf;
            });
            for (rank, result) in results.iter().enumerate() {
                let got = result.lock().unwrap().clone();
                let want: Vec<f32> = (0..len)
                    .map(|i| (0..n).map(|r| (i + r) as f32).sum())
                    .collect();
                assert_eq!(got, want, "n {n} rank {rank}");
                let expected = 2 * (n as u64 - 1) * (len as u64 / n as u64) * WIRE_ELEMENT_BYTES;
                assert_eq!(ring.sent_bytes(rank), expected);
            }
        }
    }

    #[test]
    fn reduce_scatter_then_all_gather_round_trips() {
        let n = 4;
        let ring = Ring::new(n);
        run_ranks(n, |rank| {
            let mut input: Vec<f64> = (0..16).map(|i| i as f64).collect();
            let mut part = vec![0.0; 4];
            ring.reduce_scatter(rank, &mut input, &mut part);
            let want: Vec<f64> = chunk(16, n, rank).map(|i| (n * i) as f64).collect();
            assert_eq!(part, want);
            let mut full = vec![0.0; 16];
            ring.all_gather(rank, &part, &mut full);
            let want: Vec<f64> = (0..16).map(|i| (n * i) as f64).collect();
            assert_eq!(full, want);
        });
    }
}
