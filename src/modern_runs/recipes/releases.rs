//! The Megatron-Bridge 26.x releases: the containers a run id may name ([`BRIDGE_CONTAINERS`]), the
//! id's model families, and which release a run belongs to ([`Bridge26`]).

use crate::modern_runs::ModernRun;

use super::lookup::model_and_gpu;

/// The Megatron-Bridge release whose performance configs ran a row of Megatron-Bridge's 26.x tables
/// (`validation/mbridge_26_runs.yaml`), read from the container in the row's id
/// (`mbridge-<container>-…`, the container its `source.ref` names). Each container is the
/// NVIDIA-NeMo/Megatron-Bridge release tag whose configs state the tables' plans
/// (`scripts/performance/configs/<model>/*_workload_base_configs.py` with `*_llm_pretrain.py`, and
/// from v0.6.0 `src/megatron/bridge/perf_recipes/<model>/<gpu>/*.py`): 26.02 v0.3.0, 26.02.01
/// v0.3.1, 26.04 v0.4.0, 26.04.01 v0.4.2, 26.06 v0.5.0, 26.06.01 v0.5.1, 26.08 v0.6.0. Four
/// 26.02.01 rows publish the plan of another tag's config and none of v0.3.1's, and take that
/// tag's settings: Qwen3-30B-A3B on H100 (PP 2, VP 12, EP 8) and Qwen3-235B-A22B on B300 (PP 8,
/// VP 4, EP 8) v0.3.0's (`qwen3_workload_base_configs.py:421-429`, `:121-129`), GPT-OSS 120B on B300
/// and B200 (EP 8) v0.4.0's (`gpt_oss_workload_base_configs.py:111-124`). The 26.02.01 Llama rows
/// whose plans match no tag keep v0.3.1, and only its per-model rules (below) reach them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Bridge26 {
    V030,
    V031,
    V040,
    V042,
    V050,
    V051,
    V060,
}

/// The Megatron-Bridge containers whose recipes the rules below know: 25.09 and 25.11
/// (`validation/modern_runs.yaml`) and the 26.x releases of [`bridge_26_release`]
/// (`validation/mbridge_26_runs.yaml`).
pub(super) const BRIDGE_CONTAINERS: [&str; 9] = [
    "25.09", "25.11", "26.02", "26.02.01", "26.04", "26.04.01", "26.06", "26.06.01", "26.08",
];

/// The id prefixes the rules key on, as written (lowercase): `mbridge-<container>`, the dgxc and
/// NeMo tables, torchtitan, NeMo AutoModel and the Megatron-Core MoE report.
const ID_FAMILIES: [&str; 6] = [
    "mbridge",
    "dgxc",
    "nemo-",
    "torchtitan",
    "automodel",
    "mcore-moe-report",
];

/// A run id whose prefix names whose recipe settings apply is one the rules read: the prefix as
/// written (`MBRIDGE-26.04.01-...` matched none of them, and the row was planned without the
/// recipe's settings, without a word), and a Megatron-Bridge id's container one the rules know
/// (`mbridge-26.99-...` or `mbridge-26.-x` took the generic Megatron-Bridge settings and none of
/// a release's, as if it were one).
pub(in crate::modern_runs) fn check_id_release(id: &str) -> Result<(), String> {
    let lower = id.to_ascii_lowercase();
    if let Some(family) = ID_FAMILIES
        .iter()
        .find(|f| lower.starts_with(*f) && !id.starts_with(*f))
    {
        return Err(format!(
            "id: starts with {}, which the recipe rules read only as {family} (rule: an id's prefix says whose recipe settings apply, matched as written); write id: {family}{}",
            crate::input_file::quote(&id[..family.len()]),
            &id[family.len()..]
        ));
    }
    if !id.starts_with("mbridge") {
        return Ok(());
    }
    let container = id
        .strip_prefix("mbridge-")
        .map(|rest| rest.split('-').next().unwrap_or(rest))
        .unwrap_or("");
    if BRIDGE_CONTAINERS.contains(&container) {
        return Ok(());
    }
    Err(format!(
        "id: names Megatron-Bridge container {}, whose recipe settings tpsim does not know (rule: an id starting mbridge is mbridge-CONTAINER-..., CONTAINER one of {}); write the row's container, e.g. id: mbridge-26.04.01-pretrain-llama3_70b-gb200-64g-fp8-gbs256, or an id not starting with mbridge to plan the row without recipe settings",
        crate::input_file::quote(container),
        BRIDGE_CONTAINERS.join(", ")
    ))
}

/// [`Bridge26`] of a row of the 26.x tables; `None` for every other row.
pub(super) fn bridge_26_release(run: &ModernRun) -> Option<Bridge26> {
    use Bridge26::{V030, V031, V040, V042, V050, V051, V060};
    let container = run.id.strip_prefix("mbridge-26.")?.split('-').next()?;
    let (model, gpu) = model_and_gpu(run);
    Some(match container {
        "02" => V030,
        "02.01" => match (model, gpu.as_str()) {
            ("qwen3_30b_a3b", "H100") | ("qwen3_235b_a22b", "B300") => V030,
            ("gpt_oss_120b", "B300" | "B200") => V040,
            _ => V031,
        },
        "04" => V040,
        "04.01" => V042,
        "06" => V050,
        "06.01" => V051,
        "08" => V060,
        _ => return None,
    })
}
