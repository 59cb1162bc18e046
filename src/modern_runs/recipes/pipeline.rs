//! Pipeline settings the sources ran: DeepSeek-V3's MTP depth, the stage splits their recipes
//! give (`pipeline_model_parallel_layout`), and the pipeline defaults a run leaves unstated.

use crate::model::Model;
use crate::modern_runs::ModernRun;
use crate::training::TrainingFramework;

use super::framework::framework_of;

/// MTP depths a DeepSeek-V3 run trains with: as its notes say ("w/ MTP", "w/o MTP"), else what
/// the source's own FLOP count per token shows. Megatron-Bridge's `flop_utils.py` counts the MTP
/// layer when `mtp_num_layers` is set, as tpsim's model FLOPs do (same causal-halved convention),
/// so the count it published lies near one of the two: 249.7 GFLOP/token without MTP and 260.4
/// with one at 4K tokens (the 25.11 rows labelled w/o and w/ MTP). Other models have no MTP module
/// in their published configs.
pub(in crate::modern_runs) fn mtp_layers_of(run: &ModernRun, model: &Model) -> u32 {
    // Megatron-Bridge's Nemotron 3 Super and Ultra recipes train one MTP block at depth 2
    // (recipes/nemotronh/h100/nemotron_3_super.py and nemotron_3_ultra.py at 067f987df03b:
    // `mtp_num_layers = 2`, `mtp_use_repeated_layer = True`, which the bundled models carry as
    // `mtp_shared_weights`); the performance recipes build on them (perf_recipes/nemotronh).
    if matches!(
        run.model_key.as_deref(),
        Some("nemotron3_super" | "nemotron3_ultra")
    ) && framework_of(run) == TrainingFramework::MegatronCore
    {
        return 2;
    }
    if run.model_key.as_deref() != Some("deepseek_v3") {
        return 0;
    }
    let noted = |text: &str| run.notes.iter().any(|n| n.contains(text));
    if noted("w/o MTP") {
        return 0;
    }
    if noted("w/ MTP") {
        return 1;
    }
    // 25.09 on H100 ran the layout 'Et|(tt|)*30mL' (`scripts/performance/run_script.py` at
    // 9a5e79865), whose `m` Megatron-Core requires to match `--mtp-num-layers`.
    if run.id.starts_with("mbridge-25.09") && run.hardware.gpu.eq_ignore_ascii_case("H100") {
        return 1;
    }
    let Some(published) = run.results.implied_model_flops_per_token else {
        return 0;
    };
    let per_token = |mtp_layers: u32| {
        let m = Model {
            mtp_layers,
            ..model.clone()
        };
        m.model_flops_per_token(m.seq_len).0
    };
    let miss = |mtp_layers: u32| (per_token(mtp_layers) / published).ln().abs();
    u32::from(miss(1) < miss(0))
}

/// Megatron-Bridge's DeepSeek-V3 layout without interleaving (`_get_deepseek_v3_pipeline_layout`,
/// recipes/deepseek/h100/deepseek_v3.py: pp 4 is embedding + 16, 16, 16, 13 + MTP + loss; pp 8 is
/// 8 per stage and 5 on the last; pp 16 is 4 per stage and 1 on the last): ⌈layers/pp⌉ on every
/// stage but the last, which takes the rest. None for other runs (tpsim's own split).
pub(in crate::modern_runs) fn recipe_stage_split(
    run: &ModernRun,
    model: &Model,
    pp: u32,
    vpp: u32,
) -> Option<(u32, u32)> {
    let bridge = run.id.starts_with("mbridge");
    if !bridge || run.model_key.as_deref() != Some("deepseek_v3") || pp < 2 || vpp > 1 {
        return None;
    }
    if model.layers.is_multiple_of(pp) {
        return None;
    }
    let per_stage = model.layers.div_ceil(pp);
    let last = model.layers.checked_sub(per_stage * (pp - 1))?;
    Some((per_stage, last))
}

/// The run's virtual stages per rank and micro-batch size. torchtitan's pipeline rows state the
/// schedule and the local batch but not these, so they are torchtitan's defaults at the benchmark
/// commit: as many micro-batches as pipeline stages (`pipeline_parallel_microbatches`: "The
/// default value will be the number of pipeline stages"; `n_microbatches =
/// pipeline_parallel_degree` when unset) and two stages per rank for a looped schedule such as
/// Interleaved 1F1B (`generate_split_points`: `num_stages_per_rank = 2`, "the default if no
/// pipeline split is specified"). Other rows give vp and the micro-batch, or leave the
/// micro-batch to the search.
pub(in crate::modern_runs) fn pipeline_defaults(
    run: &ModernRun,
    framework: TrainingFramework,
) -> (u32, Option<u32>) {
    let p = &run.plan;
    let pp = p.pp.unwrap_or(1);
    if framework != TrainingFramework::Torchtitan || pp <= 1 || p.vp.is_some() || p.mbs.is_some() {
        return (p.vp.unwrap_or(1), p.mbs);
    }
    let interleaved = p
        .overlap
        .as_deref()
        .is_some_and(|o| o.to_ascii_lowercase().contains("interleaved"));
    let local_batch = p.gbs.unwrap_or(0) / p.dp.unwrap_or(1).max(1);
    let micro_batch = local_batch.is_multiple_of(pp).then(|| local_batch / pp);
    (
        if interleaved { 2 } else { 1 },
        micro_batch.filter(|&b| b > 0),
    )
}
