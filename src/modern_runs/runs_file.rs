//! Reading a runs file: `parse_runs_file` (the schema version, each number's range, repeated
//! ids with the lines they sit on) and the error it refuses a file with, `RunsFileError`.

use super::recipes;
use super::{
    ModernRunsFile, check_peak_units, check_run_ga, check_run_hybrid, check_run_id, check_run_moe,
    check_run_precision, check_run_recompute, check_run_task, check_run_zero,
};
use crate::specs;

/// Why a runs file is refused: its YAML (at file:line:column, as every input file's), or a run id
/// given twice.
#[derive(Debug, thiserror::Error)]
pub enum RunsFileError {
    #[error(transparent)]
    Yaml(#[from] specs::SpecError),
    #[error(
        "{at}: run id {id} is given twice (first at line {first}); each run needs its own id (a run given twice counts twice in the summary): rename or remove one of them"
    )]
    DuplicateId {
        /// `file:line` of the second run with the id.
        at: String,
        id: String,
        first: usize,
    },
    #[error(
        "{origin}: runs: lists no runs, so there is nothing to predict; add runs under runs: (each - id: with source, model, hardware, plan and results, as in validation/modern_runs.yaml)"
    )]
    NoRuns { origin: String },
    #[error(
        "{origin}: schema_version: {given} is not a schema tpsim reads (rule: the runs files it reads, validation/modern_runs.yaml and its kin, are schema_version: {RUNS_SCHEMA_VERSION}, whose keys it knows); write the file in that schema with schema_version: {RUNS_SCHEMA_VERSION}"
    )]
    Schema { origin: String, given: u32 },
    #[error("{origin}: run {id}: {message}")]
    Number {
        origin: String,
        id: String,
        message: String,
    },
}

/// The runs-file schema tpsim reads (`schema_version: 1` in validation/modern_runs.yaml,
/// mbridge_26_runs.yaml and mcore_moe_report.yaml): a file of another version (`schema_version:
/// 9`) was read as this one without a word.
pub const RUNS_SCHEMA_VERSION: u32 = 1;

/// The published numbers a prediction is divided by, each in its range: a tiny one would make
/// the error infinite (`+inf`, `inf%`), a NaN would print as `NaN`.
const PUBLISHED_TOKENS_PER_S_PER_GPU: crate::cluster::Range = crate::cluster::Range::new(
    "results.tokens_per_s_per_gpu",
    1e-3,
    1e8,
    "tokens/s",
    "rule: a GPU trains a positive number of tokens a second, at most 100 million",
);
const PUBLISHED_PEAK_MEMORY_GIB: crate::cluster::Range = crate::cluster::Range::new(
    "results.peak_memory_gib",
    1e-3,
    1e5,
    "GiB",
    "rule: a GPU's peak memory is positive, at most 100000 GiB; null when the source does not state it",
);
/// The same peak in GB (1e9 bytes), the unit the runs file's conventions give it in.
const PUBLISHED_PEAK_MEMORY_GB: crate::cluster::Range = crate::cluster::Range::new(
    "results.peak_memory_gb",
    1e-3,
    1e5,
    "GB",
    "rule: a GPU's peak memory is positive, at most 100000 GB; null when the source does not state it",
);
/// The source's FLOPs per token: a NaN, zero or negative one compared as no match and chose the
/// layout without multi-token prediction without a word.
const PUBLISHED_MODEL_FLOPS_PER_TOKEN: crate::cluster::Range = crate::cluster::Range::new(
    "results.implied_model_flops_per_token",
    1.0,
    1e17,
    "FLOPs",
    "rule: a token costs a positive number of FLOPs, at most 1e17 (1000x a 2T-parameter model's); null when the source does not state it",
);

/// The source's numbers beside the tokens/s that tpsim does not compare, each in the range it can
/// be true in (null when the source does not state it).
const PUBLISHED_OTHER_NUMBERS: [crate::cluster::Range; 5] = [
    crate::cluster::Range::new(
        "results.mfu",
        1e-3,
        1.0,
        "",
        "rule: the fraction of the GPU's peak FLOP/s the run reached, above 0 and at most 1, so 0.45 for 45%; null when the source does not state it",
    ),
    crate::cluster::Range::new(
        "results.step_time_s",
        1e-4,
        1e6,
        "s",
        "rule: a training step takes a positive time, at most 1e6 s (11.6 days); null when the source does not state it",
    ),
    crate::cluster::Range::new(
        "results.model_tflops_per_gpu",
        1e-3,
        1e5,
        "TFLOP/s",
        "rule: a GPU computes a positive number of model FLOP/s, at most 100000 TFLOP/s; null when the source does not state it",
    ),
    crate::cluster::Range::new(
        "results.mfu_peak_tflops",
        1.0,
        1e5,
        "TFLOP/s",
        "rule: the GPU peak the source divides by for its MFU, positive, at most 100000 TFLOP/s; null when the source does not state it",
    ),
    crate::cluster::Range::new(
        "results.tokens_per_s_total",
        1e-3,
        1e14,
        "tokens/s",
        "rule: a run trains a positive number of tokens a second, at most 100 million per GPU on a million GPUs; null when the source does not state it",
    ),
];

/// Parses a current-stack runs file (`validation/modern_runs.yaml`'s format): unknown keys and
/// repeated run ids are refused.
pub fn parse_runs_file(text: &str, origin: &str) -> Result<ModernRunsFile, RunsFileError> {
    crate::input_file::check_depth(origin, text).map_err(specs::SpecError::from)?;
    specs::check_number_spellings(origin, text)?;
    let mut file: ModernRunsFile =
        yaml_serde::from_str(text).map_err(|err| specs::yaml_error(origin, text, &err))?;
    if file.schema_version != RUNS_SCHEMA_VERSION {
        return Err(RunsFileError::Schema {
            origin: origin.to_string(),
            given: file.schema_version,
        });
    }
    // An empty list printed an empty table and exit 0, as if every run had been checked.
    if file.runs.is_empty() {
        return Err(RunsFileError::NoRuns {
            origin: origin.to_string(),
        });
    }
    check_unique_ids(text, origin, file.runs.iter().map(|r| r.id.as_str()))?;
    for run in &mut file.runs {
        let results = &run.results;
        check_run_id(&run.id)
            .and_then(|()| {
                [
                    (PUBLISHED_TOKENS_PER_S_PER_GPU, results.tokens_per_s_per_gpu),
                    (PUBLISHED_PEAK_MEMORY_GIB, results.peak_memory_gib),
                    (PUBLISHED_PEAK_MEMORY_GB, results.peak_memory_gb),
                    (
                        PUBLISHED_MODEL_FLOPS_PER_TOKEN,
                        results.implied_model_flops_per_token,
                    ),
                ]
                .into_iter()
                .chain(PUBLISHED_OTHER_NUMBERS.into_iter().zip([
                    results.mfu,
                    results.step_time_s,
                    results.model_tflops_per_gpu,
                    results.mfu_peak_tflops,
                    results.tokens_per_s_total,
                ]))
                .filter_map(|(range, value)| Some(range.check(value?)))
                .collect::<Result<(), String>>()
            })
            .and_then(|()| check_peak_units(results))
            .and_then(|()| check_run_zero(run))
            .and_then(|()| check_run_ga(run))
            .and_then(|()| check_run_task(&run.task))
            .and_then(|()| recipes::check_id_release(&run.id))
            .and_then(|()| check_run_recompute(run))
            .and_then(|()| check_run_precision(run))
            .and_then(|()| check_run_hybrid(run))
            .and_then(|()| check_run_moe(run))
            .map_err(|message| RunsFileError::Number {
                origin: origin.to_string(),
                id: crate::input_file::quote(&run.id),
                message,
            })
            .map(|model| run.bundled_moe_model = model)?;
    }
    Ok(file)
}

/// Refuses a run id given twice in the runs file `text` (either format: each run is a mapping with
/// an `id:` key), naming the line of each.
pub fn check_unique_ids<'a>(
    text: &str,
    origin: &str,
    ids: impl IntoIterator<Item = &'a str>,
) -> Result<(), RunsFileError> {
    let mut seen = std::collections::HashSet::new();
    for id in ids {
        if seen.insert(id) {
            continue;
        }
        let lines = id_lines(text, id);
        let first = lines.first().copied().unwrap_or(0);
        let at = match lines.get(1) {
            Some(line) => format!("{origin}:{line}"),
            None => origin.to_string(),
        };
        return Err(RunsFileError::DuplicateId {
            at,
            id: crate::input_file::quote(id),
            first,
        });
    }
    Ok(())
}

/// The 1-based lines of `text` whose key is `id:` (after any `- ` sequence markers) and whose
/// value, unquoted, is `id`.
fn id_lines(text: &str, id: &str) -> Vec<usize> {
    let unquote = |v: &str| {
        let v = v.trim();
        for q in ['"', '\''] {
            if let Some(inner) = v.strip_prefix(q).and_then(|v| v.strip_suffix(q)) {
                return inner.to_string();
            }
        }
        v.split(" #").next().unwrap_or(v).trim_end().to_string()
    };
    text.lines()
        .enumerate()
        .filter_map(|(i, line)| {
            let mut key = line.trim_start();
            while let Some(rest) = key.strip_prefix("- ") {
                key = rest.trim_start();
            }
            let value = key.strip_prefix("id:")?;
            (unquote(value) == id).then_some(i + 1)
        })
        .collect()
}
