//! How the sequence splits: sequence parallelism (Megatron-Core `_split_along_first_dim`), context
//! parallelism's 2·cp load-balancing chunks and head exchange, DeepSpeed-Ulysses' limits
//! (Megatron-DeepSpeed `initialize_model_parallel`), MoE's need for sequence parallelism and
//! torchtitan's CP sharding.

use crate::model::Model;
use crate::training::Training;

use super::error::PlanError;
use super::request::PlanRequest;
use super::valid::{divisors, list};

/// The sequence length a fix offers as a multiple of `multiple`: the next one after `seq_len`,
/// or the one before where the next is past the longest sequence tpsim accepts (which would be
/// refused in turn).
pub(super) fn seq_len_multiple_near(seq_len: u32, multiple: u64) -> u64 {
    let longer = u64::from(seq_len).div_ceil(multiple) * multiple;
    if longer <= u64::from(crate::model::MAX_SEQ_LEN) {
        longer
    } else {
        (u64::from(seq_len) / multiple * multiple).max(multiple)
    }
}

/// Whether sequence parallelism at `tp` (under `cp`) splits each rank's share of the sequence
/// into whole shards: Megatron-Core's `_split_along_first_dim` asserts the sequence dimension
/// divides by the TP size. torchtitan's DTensor shards unevenly, so it has no such rule.
pub fn sp_splits_sequence(tp: u32, cp: u32, training: &Training) -> bool {
    training.framework == crate::training::TrainingFramework::Torchtitan
        || (training.seq_len / cp.max(1)).is_multiple_of(tp.max(1))
}

/// [`PlanError::SpSequence`] where sequence parallelism does not split the sequence evenly.
pub(super) fn sp_sequence_error(
    tp: u32,
    cp: u32,
    sp: bool,
    training: &Training,
) -> Option<PlanError> {
    if !sp || tp < 2 || sp_splits_sequence(tp, cp, training) {
        return None;
    }
    let cp = cp.max(1);
    let local = training.seq_len / cp;
    // A multiple of tp x cp, and of 2cp (CP's load-balancing chunks) under CP.
    let whole = u64::from(tp) * u64::from(cp);
    let multiple = if cp > 1 {
        let chunks = 2 * u64::from(cp);
        whole / crate::integer::gcd(whole, chunks) * chunks
    } else {
        whole
    };
    Some(PlanError::SpSequence {
        tp,
        local,
        shard_of: if cp > 1 { "CP rank's " } else { "" },
        per_rank: if cp > 1 {
            format!(" (the {}-token sequence over --cp {cp})", training.seq_len)
        } else {
            String::new()
        },
        multiple,
        longer: seq_len_multiple_near(training.seq_len, multiple),
    })
}

/// The multiple of the sequence length context parallelism at `cp` needs under `framework`: 2·cp
/// where it balances the causal mask over 2·cp chunks, cp under DeepSpeed-Ulysses
/// (`TrainingFramework::cp_balances_causal_chunks`).
pub fn cp_sequence_multiple(cp: u32, framework: crate::training::TrainingFramework) -> u64 {
    if framework.cp_balances_causal_chunks() {
        2 * u64::from(cp)
    } else {
        u64::from(cp)
    }
}

/// Whether `cp` splits a `seq_len`-token sequence as `framework` splits it (`cp_sequence_multiple`).
pub fn cp_splits_sequence(
    cp: u32,
    seq_len: u32,
    framework: crate::training::TrainingFramework,
) -> bool {
    cp <= 1 || u64::from(seq_len).is_multiple_of(cp_sequence_multiple(cp, framework))
}

/// The context-parallel degrees, listed for a message, that split a `seq_len`-token sequence as
/// `framework` splits it (2·cp equal chunks, or cp shards under DeepSpeed-Ulysses) on `gpus` GPUs.
/// cp 1 always splits; an odd length has no larger 2·cp-chunked cp, and divisors of seq_len / 2
/// alone would list some.
pub fn cp_degrees_splitting(
    seq_len: u32,
    gpus: u32,
    framework: crate::training::TrainingFramework,
) -> String {
    let valid = (1..=seq_len.clamp(1, 256))
        .filter(|c| cp_splits_sequence(*c, seq_len, framework))
        .filter(|c| gpus.is_multiple_of(*c));
    list(valid)
}

/// The all-to-all exchange splits each TP rank's query and K/V heads over the CP ranks
/// (`context_parallel::heads_per_tp_rank`); None where it does or another exchange runs.
pub fn cp_heads_error(cp: u32, tp: u32, model: &Model, training: &Training) -> Option<PlanError> {
    if cp <= 1 || training.cp_exchange != crate::training::CpExchange::HeadAllToAll {
        return None;
    }
    let (query_heads, kv_heads) = crate::cost::context_parallel::heads_per_tp_rank(model, tp);
    if training.framework.replicates_kv_heads_over_cp() {
        let splits = |cp: u32| {
            query_heads.is_multiple_of(cp)
                && (kv_heads.is_multiple_of(cp) || cp.is_multiple_of(kv_heads))
        };
        return (!splits(cp)).then(|| PlanError::UlyssesHeads {
            cp,
            tp,
            query_heads,
            kv_heads,
            valid: list(divisors(query_heads).into_iter().filter(|&d| splits(d))),
        });
    }
    if query_heads.is_multiple_of(cp) && kv_heads.is_multiple_of(cp) {
        return None;
    }
    Some(PlanError::CpHeads {
        cp,
        tp,
        query_heads,
        kv_heads,
        valid: list(
            divisors(kv_heads)
                .into_iter()
                .filter(|d| query_heads.is_multiple_of(*d)),
        ),
        other: if model
            .attention_window
            .is_some_and(|w| w.windows_some_layer())
        {
            "kv-all-gather"
        } else {
            "kv-ring or kv-all-gather"
        },
    })
}

/// Whether the framework runs context parallelism only without tensor and pipeline parallelism
/// (`TrainingFramework::runs_cp_beside_tp_or_pp`) and the plan has either beside cp: the search's
/// question, without the message.
pub fn ulysses_refuses_model_parallelism(cp: u32, tp: u32, pp: u32, training: &Training) -> bool {
    cp > 1 && !training.framework.runs_cp_beside_tp_or_pp() && (tp > 1 || pp > 1)
}

/// [`PlanError::UlyssesWithModelParallelism`] where the framework runs context parallelism only
/// without tensor and pipeline parallelism (`TrainingFramework::runs_cp_beside_tp_or_pp`) and the
/// plan has either beside cp.
pub fn ulysses_model_parallel_error(
    cp: u32,
    tp: u32,
    pp: u32,
    training: &Training,
) -> Option<PlanError> {
    if !ulysses_refuses_model_parallelism(cp, tp, pp, training) {
        return None;
    }
    let (degrees, fix) = match (tp > 1, pp > 1) {
        (true, true) => (format!("--tp {tp} and --pp {pp}"), "--tp 1 --pp 1"),
        (true, false) => (format!("--tp {tp}"), "--tp 1"),
        _ => (format!("--pp {pp}"), "--pp 1"),
    };
    Some(PlanError::UlyssesWithModelParallelism {
        cp,
        degrees,
        fix: fix.to_string(),
    })
}

/// Megatron-Core's `MoELayer.forward` raises in training when the attention's TP group has more
/// than one rank and sequence parallelism is off (megatron/core/transformer/moe/moe_layer.py, in
/// every release since core_v0.12): such a plan is not one it runs.
pub(super) fn check_moe_sequence_parallel(
    r: &PlanRequest,
    model: &Model,
    training: &Training,
) -> Result<(), PlanError> {
    if moe_needs_sequence_parallel(model, training.framework, r.tp) && !r.sequence_parallel {
        // Where sequence parallelism would not split the sequence either, adding it is refused in
        // turn: the fix names the sequence length it needs.
        let fix = match sp_sequence_error(r.tp, r.cp, true, training) {
            Some(PlanError::SpSequence {
                local,
                shard_of,
                per_rank,
                multiple,
                longer,
                ..
            }) => format!(
                "sequence parallelism needs each {shard_of}{local}-token sequence{per_rank} to split evenly over the {} tensor-parallel ranks, which it does not; give a --seq-len that is a multiple of {multiple} (e.g. --seq-len {longer}) with --sequence-parallel, or use --tp 1",
                r.tp
            ),
            _ => "add --sequence-parallel, or use --tp 1".to_string(),
        };
        return Err(PlanError::MoeTpWithoutSequenceParallel { tp: r.tp, fix });
    }
    Ok(())
}

/// Whether a plan of `model` at `tp` must run sequence parallelism under `framework`: Megatron-Core
/// trains MoE layers under TP only with it ([`PlanError::MoeTpWithoutSequenceParallel`]).
pub fn moe_needs_sequence_parallel(
    model: &Model,
    framework: crate::training::TrainingFramework,
    tp: u32,
) -> bool {
    framework == crate::training::TrainingFramework::MegatronCore && model.moe.is_some() && tp > 1
}

/// torchtitan turns FSDP2 on over the dp-shard x cp mesh whenever cp > 1, so a plan with cp > 1
/// and its states unsharded (ZeRO below 3) is not one it runs: the nearest it runs is ZeRO-3 with
/// one copy of the states per data-parallel rank (HSDP, each copy sharded over the cp ranks).
pub(super) fn check_torchtitan_cp_sharding(
    r: &PlanRequest,
    training: &Training,
) -> Result<(), PlanError> {
    if training.framework != crate::training::TrainingFramework::Torchtitan
        || r.cp <= 1
        || r.zero == 3
    {
        return Ok(());
    }
    let fix = if r.dp > 1 {
        format!(
            "--zero 3 --dp-replicas {} (one copy of the states per data-parallel rank, each sharded over the cp ranks, as torchtitan runs data_parallel_replicate_degree {} beside cp), or --zero 3",
            r.dp, r.dp
        )
    } else {
        "--zero 3".to_string()
    };
    Err(PlanError::TorchtitanReplicatedCp {
        zero: r.zero,
        cp: r.cp,
        fix,
    })
}
