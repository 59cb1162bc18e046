//! Context parallelism as Transformer Engine runs it under Megatron-Core
//! (`transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py`,
//! `attn_forward_func_with_cp`): the communication of one layer's attention per micro-batch, which
//! part of it hides, and the copies around it. PyTorch's own ring, as torchtitan runs it, is
//! `torch_ring`.
//!
//! - `p2p` (`AttnFuncWithCPAndKVP2P`, Megatron-Core's default): cp − 1 ring steps, each passing this
//!   rank's K/V chunk (the K/V heads, GQA's fewer) to the next rank under the attention blocks of
//!   the step it feeds; the backward passes K/V and the accumulated dK/dV (twice the bytes) under
//!   the backward's blocks.

use super::comm::Collective;
use super::{PassComm, exposed_under};
use crate::cluster::LinkSpeed;

/// One layer's forward and backward communication under the point-to-point K/V ring, per
/// micro-batch: `chunk` is one rank's K and V (`comm::cp_kv_chunk_bytes`), `step_attention_*_s`
/// one ring step's attention (the layer's over cp); full recompute (`recompute_share` of the
/// layers) repeats the forward ring.
pub(crate) fn kv_ring_pass_comm(
    chunk: f64,
    cp: u32,
    speed: LinkSpeed,
    step_attention_forward_s: f64,
    step_attention_backward_s: f64,
    recompute_share: f64,
) -> PassComm {
    let steps = f64::from(cp - 1);
    let send = Collective::SendRecv.time(chunk, 2, speed);
    let forward_exposed = steps * exposed_under(send, step_attention_forward_s);
    let backward_exposed = steps * exposed_under(2.0 * send, step_attention_backward_s);
    PassComm {
        forward_s: steps * send,
        backward_s: steps * (2.0 + recompute_share) * send,
        forward_exposed_s: forward_exposed,
        backward_exposed_s: backward_exposed + recompute_share * forward_exposed,
        wire_bytes: steps * (3.0 + recompute_share) * chunk,
    }
}
