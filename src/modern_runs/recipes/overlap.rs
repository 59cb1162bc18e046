//! The communication overlap the recipes turn on, and the low-precision parameter all-gather.

use crate::modern_runs::ModernRun;
use crate::training::Overlap;

use super::lookup::{model_and_gpu, precision_is};
use super::releases::{Bridge26, bridge_26_release};

/// The communication overlaps a Megatron-Bridge recipe turns off where Megatron-Core's benchmark
/// defaults (`TrainingFramework::default_overlap`: TP, gradient-reduce, parameter-gather and
/// pipeline overlap on) do not hold:
/// - TP communication overlap (`CommOverlapConfig.tp_comm_overlap`) off:
///   - DeepSeek-V3 on H100, 25.09: the recipe builds its comm-overlap config with
///     `tp_comm_overlap=False` when the launcher passes none, and `run_script.py` passes none
///     (9a5e798 `src/megatron/bridge/recipes/deepseek/deepseek_v3.py:315-318`,
///     `scripts/performance/run_script.py:72-80`);
///   - Qwen3-235B-A22B on H100 (TP 2), 25.11 and 26.x:
///     `CommOverlapConfig(tp_comm_overlap=False)` (`scripts/performance/configs/qwen3/
///     qwen3_llm_pretrain.py:153` at v0.2.0 and 4a82e16; `configs/qwen/qwen3_llm_pretrain.py:184`
///     v0.3.0, `:183` v0.3.1, `:167` v0.4.0 and v0.4.2);
///   - Llama 3 70B and Llama 3.1 405B in NVFP4 on GB300 and GB200, every 26.x release: `tp_comm_overlap
///     = False if precision == "nvfp4"` (`configs/llama/llama3_llm_pretrain.py:79`, `:113` and
///     `llama31_llm_pretrain.py:74`, `:108` at v0.3.0; `llama3_llm_pretrain.py:80`, `:115` at
///     v0.3.1 to v0.5.0; `llama31_llm_pretrain.py:75`, `:110` at v0.3.1 and v0.4.0, `:87`, `:122`
///     at v0.4.2 and v0.5.0).
/// - Gradient-reduce overlap off: DeepSeek-V3 on H100, 25.09 (`run_script.py:106-107` at 9a5e798:
///   `overlap_grad_reduce = False` on H100).
/// - Parameter-gather overlap off:
///   - MXFP8 at 25.11 ("keeping this eanbled causes NaN grad norm"): DeepSeek-V3 GB300 and GB200
///     (`scripts/performance/configs/deepseek/deepseek_llm_pretrain.py:75-78`, `:112-115` at
///     v0.2.0), Qwen3-235B-A22B B200 (`configs/qwen3/qwen3_llm_pretrain.py:133-136`), Llama 3 70B
///     GB300, GB200 and B200 (`configs/llama3/llama3_llm_pretrain.py:80-83`, `:115-118`,
///     `:150-153`), Llama 3.1 405B GB300, GB200 and B200 (`configs/llama31/llama31_llm_pretrain.py:75-78`,
///     `:110-113`, `:140-143`); the same at 4a82e16;
///   - Llama 3.1 405B on GB200 in NVFP4 (the V2 configs the tables run) from v0.4.2:
///     `disable_param_gather_overlap` (`configs/llama/llama31_llm_pretrain.py:46-55`, called at
///     `:123-124`, v0.4.2 and v0.5.0).
///
/// - Kimi K2, every Megatron-Bridge release: Muon's recipe turns the distributed optimizer and
///   its parameter-gather overlap off ("Muon needs this to be False",
///   `src/megatron/bridge/recipes/kimi/kimi_k2.py:199-200` at v0.3.1 to v0.5.0): the layer-wise
///   optimizer all-gathers the updated weights after the step.
///
/// Context parallelism is left at tpsim's K/V ring: no Megatron-Bridge recipe of a published Llama
/// CP row sets `cp_comm_type`, whose Megatron-Core default is the same ring ("p2p").
pub(in crate::modern_runs) fn recipe_comm_overlap(run: &ModernRun, overlap: &mut Overlap) {
    let (model, gpu) = model_and_gpu(run);
    let gpu = gpu.as_str();
    let release = bridge_26_release(run);
    let r25_09 = run.id.starts_with("mbridge-25.09");
    let r25_11 = run.id.starts_with("mbridge-25.11");
    let llama = matches!(model, "llama3_70b" | "llama31_405b");
    let tp_off = (r25_09 && model == "deepseek_v3" && gpu == "H100")
        || ((r25_11 || release.is_some()) && model == "qwen3_235b_a22b" && gpu == "H100")
        || (release.is_some()
            && llama
            && precision_is(run, "nvfp4")
            && matches!(gpu, "GB300" | "GB200"));
    if tp_off {
        overlap.tp_comm = false;
    }
    if r25_09 && model == "deepseek_v3" && gpu == "H100" {
        overlap.grad_reduce = false;
    }
    let param_gather_off = (r25_11
        && precision_is(run, "mxfp8")
        && match model {
            "deepseek_v3" => matches!(gpu, "GB300" | "GB200"),
            "qwen3_235b_a22b" => gpu == "B200",
            "llama3_70b" | "llama31_405b" => matches!(gpu, "GB300" | "GB200" | "B200"),
            _ => false,
        })
        || (release.is_some_and(|r| r >= Bridge26::V042)
            && model == "llama31_405b"
            && gpu == "GB200"
            && precision_is(run, "nvfp4"));
    if param_gather_off || (run.id.starts_with("mbridge") && model == "kimi_k2") {
        overlap.param_gather = false;
    }
}

/// Whether a Megatron-Bridge 26.x recipe all-gathers its low-precision weights as the parameters
/// (`Training::fp8_param_gather`, Megatron-Core `fp8_param_gather` / `fp4_param_gather`) where it
/// departs from Megatron-Core's benchmark default (on):
/// - NVFP4 at v0.3.0, v0.3.1 and v0.4.0 (26.02 to 26.04): `bf16_with_nvfp4_mixed` sets
///   `fp8_param_gather = False` and has no FP4 parameter gather
///   (`src/megatron/bridge/training/mixed_precision.py:392-403` at v0.3.0 and v0.3.1, `:397` at
///   v0.4.0); from v0.4.2 it sets `fp4_param_gather = True` (`:422`), the default here;
/// - Kimi K2 in MXFP8: its recipes train with Muon (`optimizer_type="muon"`, the rows' note), and
///   `set_kimi_k2_common_configs` turns the MXFP8 parameter gather off for Muon
///   (`scripts/performance/configs/kimi/kimi_llm_pretrain.py:38-44`, v0.3.1 to v0.5.0);
/// - Nemotron 3 Super in NVFP4 from v0.4.2 on: "Disabled until MCore PR 4358 lands."
///   (`fp4_param_gather = False`, `scripts/performance/configs/nemotronh/nemotron_3_llm_pretrain.py`
///   l. 44-45 at v0.4.2 to v0.5.1, `perf_recipes/nemotronh/common.py` l. 69 at v0.6.0).
pub(in crate::modern_runs) fn recipe_low_precision_param_gather(run: &ModernRun) -> Option<bool> {
    let release = bridge_26_release(run)?;
    let (model, _) = model_and_gpu(run);
    let early_nvfp4 = release <= Bridge26::V040 && precision_is(run, "nvfp4");
    let kimi_muon = model == "kimi_k2" && precision_is(run, "mxfp8");
    let super_nvfp4 = model == "nemotron3_super" && precision_is(run, "nvfp4");
    (early_nvfp4 || kimi_muon || super_nvfp4).then_some(false)
}
