//! The terminal renderer: scenario line, ranked-plan table, one plan's breakdown, search
//! statistics and the "why the best plan" reading.

use comfy_table::{Cell, CellAlignment, ContentArrangement, Table, presets::UTF8_FULL_CONDENSED};
use std::fmt::Write as _;

use super::Report;
use crate::cluster::{Cluster, Link};
use crate::cost::Estimate;
use crate::cost::terms::TermKind;
use crate::planner::SearchStats;
use crate::units::format_count;

pub(crate) fn gib(bytes: f64) -> String {
    format!("{:.1}", bytes / crate::units::GIB)
}

/// FLOP/s as TFLOP/s with three significant digits or more, so a CPU profile's 0.076 does not
/// read as 0.
pub(crate) fn tflops(flops_per_s: f64) -> String {
    let t = flops_per_s / 1e12;
    if t >= 100.0 {
        format!("{t:.0}")
    } else if t >= 1.0 {
        format!("{t:.1}")
    } else {
        crate::units::show_measured(t, 3)
    }
}

/// A per-GPU throughput already in TFLOP/s, to 0.1 and, below 1 (a CPU profile), to 0.001 or
/// three significant digits where 0.001 would print it as 0.
pub(crate) fn tflops_fine(tflops: f64) -> String {
    if tflops >= 1.0 {
        format!("{tflops:.1}")
    } else {
        crate::units::show_measured(tflops, 3)
    }
}

pub(crate) fn duration(seconds: f64) -> String {
    let days = seconds / 86400.0;
    if days >= 1.0 {
        format!("{days:.1} days")
    } else if seconds >= 360.0 {
        format!("{:.1} h", seconds / 3600.0)
    } else if seconds >= 60.0 {
        format!("{:.1} min", seconds / 60.0)
    } else {
        format!("{seconds:.1} s")
    }
}

pub(crate) fn link_name(link: Link) -> &'static str {
    match link {
        Link::Nvlink => "NVLink",
        Link::Network => "network",
    }
}

/// Which layers have experts, where not all: the dense prefix (DeepSeek's
/// `first_k_dense_replace`) and, under Megatron's `--moe-layer-freq N`, every N-th layer after it
/// (`Model::is_moe_layer`), with the count (`Model::moe_layers`), so a model with experts on 24 of its 48 layers does
/// not read as one with experts everywhere.
fn moe_layers_words(m: &super::ModelSummary, moe: &crate::model::Moe) -> String {
    let dense = match moe.first_dense_layers {
        0 => String::new(),
        1 => ", first layer dense".to_string(),
        k => format!(", first {k} layers dense"),
    };
    if moe.layer_freq <= 1 {
        return dense;
    }
    let f = moe.layer_freq;
    let ordinal = match (f % 10, f % 100) {
        (1, r) if r != 11 => "st",
        (2, r) if r != 12 => "nd",
        (3, r) if r != 13 => "rd",
        _ => "th",
    };
    let (then, from) = if dense.is_empty() {
        (",", " from the first")
    } else {
        (", then", "")
    };
    format!(
        "{dense}{then} MoE on every {f}{ordinal} layer{from}: {} of {} layers",
        m.moe_layers, m.layers
    )
}

/// One-line description of the scenario.
pub fn scenario_line(report: &Report) -> String {
    let m = &report.model;
    let c = &report.cluster;
    let t = &report.training;
    let gqa = match &m.mla {
        Some(mla) => format!(
            ", latent attention (KV rank {}{})",
            mla.kv_lora_rank,
            mla.q_lora_rank
                .map(|q| format!(", query rank {q}"))
                .unwrap_or_default()
        ),
        None if m.kv_heads != m.heads => format!(", {}", counted(m.kv_heads, "KV head")),
        None => String::new(),
    };
    // A head width set apart from hidden / heads (Qwen3's and Gemma's `head_dim`, Megatron's
    // `--kv-channels`) is said, so the line echoes the width the attention is priced at: "hidden
    // 4096, 64 heads" alone reads as heads of 64. Latent attention says its own widths.
    let gqa =
        if m.mla.is_none() && u64::from(m.heads) * u64::from(m.head_dim) != u64::from(m.hidden) {
            format!("{gqa}, head dim {}", m.head_dim)
        } else {
            gqa
        };
    let gated = if m.gated_mlp { ", gated MLP" } else { "" };
    // Mixture of experts: what routes where, and the parameters one token uses.
    let experts = match &m.moe {
        Some(moe) => format!(
            ", {} expert{} (top-{}{}, ffn {}{}{}{}), {} active (embeddings included)",
            moe.experts,
            if moe.experts == 1 { "" } else { "s" },
            moe.router_topk,
            // One group holding every expert limits nothing (Kimi K2's config: n_group 1).
            if moe.router_groups > 1 {
                format!(
                    " from {} of {} groups",
                    moe.router_group_topk, moe.router_groups
                )
            } else {
                String::new()
            },
            moe.ffn_hidden,
            // LatentMoE: the routed experts' width between the two projections.
            moe.latent_size.map_or(String::new(), |latent| format!(
                " on a latent width of {latent}"
            )),
            if moe.shared_expert_ffn_hidden > 0 {
                format!(", shared ffn {}", moe.shared_expert_ffn_hidden)
            } else {
                String::new()
            },
            moe_layers_words(m, moe),
            format_count(m.active_params)
        ),
        None => String::new(),
    };
    let experts = match m.attention_window {
        Some(w) => {
            let windowed = m.layers - m.layers.checked_div(w.full_every).unwrap_or(0);
            format!(
                "{experts}, sliding window of {} token{} on {windowed} of {} layers",
                w.tokens,
                if w.tokens == 1 { "" } else { "s" },
                m.layers
            )
        }
        None => experts,
    };
    // A hybrid stack's layers are each one block of its pattern (`model::hybrid`).
    let experts = match &m.hybrid {
        Some(hybrid) => {
            let counts = hybrid.counts();
            let blocks = [
                (counts.mamba, "Mamba-2"),
                (counts.attention, "attention"),
                (counts.mlp, "MLP"),
                (counts.moe, "MoE"),
            ]
            .iter()
            .filter(|(n, _)| *n > 0)
            .map(|(n, what)| format!("{n} {what}"))
            .collect::<Vec<_>>()
            .join(", ");
            format!(
                "{experts}, hybrid Mamba-Transformer stack of one block per layer ({blocks}; Mamba-2 mixers of {} heads of {}, state {}, {} groups)",
                hybrid.mamba_heads,
                hybrid.mamba_head_dim,
                hybrid.mamba_state_dim,
                hybrid.mamba_groups
            )
        }
        None => experts,
    };
    let experts = if m.mtp_layers > 0 {
        // A hybrid stack's MTP depth is an attention block and one of the last layer's MLP kind
        // (`Model::check_hybrid`: NVIDIA's `*E`), with one set of weights when the depths share it.
        let block = match &m.hybrid {
            Some(hybrid) => {
                let last = hybrid.pattern.chars().last();
                format!(
                    " of an attention and {} block (*{}){}",
                    if last == Some('E') {
                        "an MoE"
                    } else {
                        "an MLP"
                    },
                    last.unwrap_or('E'),
                    if hybrid.mtp_shared_weights && m.mtp_layers > 1 {
                        ", one set of weights for all"
                    } else {
                        ""
                    }
                )
            }
            None => String::new(),
        };
        format!(
            "{experts}, {}{block} (on the last stage, {}with its own output-layer pass and loss)",
            counted(m.mtp_layers, "MTP layer"),
            if m.mtp_layers == 1 { "" } else { "each " }
        )
    } else {
        experts
    };
    let positions = m.position_embedding_type.describe_with(m.rotary_percent);
    let traits = [
        match (m.linear_bias, m.qkv_bias) {
            (true, _) => "biases",
            (false, true) => "q/k/v biases only",
            (false, false) => "no biases",
        },
        if m.tied_embeddings {
            "tied embeddings"
        } else {
            "untied output layer"
        },
        &positions,
        match (m.norm, m.qk_norm) {
            (crate::model::Norm::Layernorm, false) => "layernorm",
            (crate::model::Norm::Layernorm, true) => "layernorm (and on each query and key head)",
            (crate::model::Norm::Rmsnorm, false) => "RMSNorm",
            (crate::model::Norm::Rmsnorm, true) => "RMSNorm (and on each query and key head)",
        },
        if m.dropout { "dropout" } else { "no dropout" },
    ]
    .join(", ");
    // Layers whose GEMMs run in bf16 under a low-precision plan shown (`pipeline::Bf16Keep`).
    let low_precision = report
        .plans
        .iter()
        .any(|e| e.plan.precision != crate::plan::Precision::Bf16);
    let bf16_words = bf16_layer_words(t, &report.plans, m);
    // How the kernels run, where that departs from the framework's fused default.
    let kernel_words = [
        if low_precision { bf16_words.as_str() } else { "" },
        match t.kernel_fusion {
            crate::training::KernelFusion::Fused => "",
            crate::training::KernelFusion::Eager => {
                "eager, no torch.compile: norms, RoPE and activation unfused; "
            }
        },
        if t.framework == crate::training::TrainingFramework::MegatronCore
            && !t.gradient_accumulation_fusion
        {
            "no gradient-accumulation fusion: weight gradients added to main_grad after each micro-batch; "
        } else {
            ""
        },
        if t.framework == crate::training::TrainingFramework::MegatronCore
            && !t.rope_fusion
            && m.position_embedding_type.is_rotary()
        {
            "unfused RoPE: Q and K rotated by separate PyTorch operators; "
        } else {
            ""
        },
    ]
    .concat();
    format!(
        "model {} ({}, {}): {} params, {}, hidden {}, {}{gqa}, ffn {}{gated}{experts}, vocab {}; {traits}\n\
         cluster: {} node{} x {} {} = {} ({} GiB{}, {} TFLOP/s bf16 each){}{}\n\
         training: {} x {} per step, {} gradients, optimizer states {} (weights + states: {}), {} attention, as {} runs it ({}{}){}{}{}{}{}{}{}{}{}",
        m.name,
        m.origin,
        if m.origin.starts_with("derived") {
            "printed so you can check it"
        } else {
            "shape used as stated"
        },
        format_count(m.params),
        counted(m.layers, "layer"),
        m.hidden,
        counted(m.heads, "head"),
        m.ffn_hidden,
        m.vocab,
        c.nodes,
        if c.nodes == 1 { "" } else { "s" },
        c.gpus_per_node,
        match &c.gpu_file {
            Some((file, differ)) => format!(
                "{} (the profile in {file}, not the bundled {}: {}{})",
                c.gpu,
                c.gpu,
                differ.iter().take(2).cloned().collect::<Vec<_>>().join(", "),
                match differ.len() {
                    0..=2 => String::new(),
                    n => format!(" and {} more", n - 2),
                }
            ),
            None => c.gpu.clone(),
        },
        counted(c.total_gpus, "GPU"),
        gib(c.gpu_memory_bytes as f64),
        match c.max_memory_bytes {
            Some(limit) => format!(
                ", plans held below {} GiB by --max-memory-gib",
                gib(limit as f64)
            ),
            None => String::new(),
        },
        tflops(c.peak_flops),
        if c.nvlink_domain_gpus <= c.gpus_per_node {
            String::new()
        } else if c.nvlink_domain_gpus < c.rack_nvlink_gpus {
            format!(
                "; NVLink in {}-GPU segments of {}-GPU racks (16 trays per rack, NVIDIA's Slurm placement for jobs of 128+ GPUs)",
                c.nvlink_domain_gpus, c.rack_nvlink_gpus
            )
        } else {
            format!("; NVLink across {}-GPU racks", c.nvlink_domain_gpus)
        },
        if c.sustained_clock_factor < 1.0 {
            format!(
                "; tensor-core kernels {}% slower than the fitted efficiencies give: the clock a busy GPU holds at its power cap (sustained/burst matmul {:.3} against the reference {:.3}, Hopper's)",
                percent_off_the_ends(100.0 * (1.0 - c.sustained_clock_factor)),
                c.sustained_clock_factor * crate::cluster::REFERENCE_SUSTAINED_MATMUL_FRACTION,
                crate::cluster::REFERENCE_SUSTAINED_MATMUL_FRACTION
            )
        } else {
            String::new()
        },
        sequences(t.global_batch),
        counted(t.seq_len, "token"),
        t.grad_dtype.as_str(),
        t.optimizer_states.as_str(),
        bytes_at_rest_words(t, &report.plans),
        t.attention.as_str(),
        t.framework.as_str(),
        kernel_words,
        overlap_words(t, &report.plans, &report.model),
        // What selective recompute means, where a plan shown uses it.
        match t.selective_recompute() {
            other @ (crate::training::SelectiveRecompute::AlternateMatmuls
            | crate::training::SelectiveRecompute::CheckpointedAttention
            | crate::training::SelectiveRecompute::Modules(_))
                if report
                    .plans
                    .iter()
                    .any(|e| e.plan.recompute == crate::plan::Recompute::Selective) =>
            {
                format!("; recompute selective = {}", other.describe())
            }
            _ => String::new(),
        },
        // Balanced routing is an assumption a launch line does not carry (the router decides the
        // load), so an MoE model's header says it is priced so: validation/modern_runs.yaml's MoE
        // benchmarks are "force-balanced across experts", and --moe-imbalance prices otherwise.
        if t.moe_imbalance == 1.0 && m.moe.is_some() {
            "; MoE routing: balanced, every expert the same share of tokens (as the published MoE \
             benchmarks force it; a real router's busiest expert gets more: --moe-imbalance F \
             prices it at F x its share)"
                .to_string()
        } else if t.moe_imbalance == 1.0 {
            String::new()
        } else {
            format!(
                "; MoE routing: the busiest expert gets {} x the balanced load",
                t.moe_imbalance
            )
        },
        // The capacity factor given: what it caps the load at is in the routing above.
        match t.moe_capacity_factor {
            Some(c) => format!(
                "; MoE capacity factor {}: tokens past {} x an expert's balanced share are dropped",
                crate::units::show_number(c),
                crate::units::show_number(c)
            ),
            None => String::new(),
        },
        // Only where a shown plan splits its experts (ep > 1) does a token cross GPUs: with every
        // shown plan at ep 1 (e.g. under a tight --max-memory-gib) there is no dispatch to describe.
        if m.moe.is_some() && report.plans.iter().any(|e| e.plan.ep > 1) {
            moe_dispatch_words(t.moe_dispatch)
        } else {
            String::new()
        },
        [
            match t.local_batch {
                Some(local) => format!(
                    "; local batch {local}: one pipeline schedule per {local} sequences per data-parallel rank"
                ),
                None => String::new(),
            },
            // A V-shaped schedule, said wherever it is asked for: every pipelined plan runs it.
            match t.pp_schedule {
                crate::training::PipelineSchedule::OneFOneB => String::new(),
                schedule => format!(
                    "; pipeline schedule {} ({}: two model chunks per GPU in a V, the backward split into input and weight gradients)",
                    schedule.as_str(),
                    schedule.torchtitan_name(2)
                ),
            },
            match t.cpu_offload_layers {
                0 => String::new(),
                n => format!(
                    "; activations of the first {n} layers offloaded to host memory in the forward and reloaded for the backward (--cpu-offloading-num-layers {n}; pp 1, no recompute)"
                ),
            },
        ]
        .concat(),
        // Said where it is not Transformer Engine's ring that Megatron-Core runs.
        if report.plans.iter().any(|e| e.plan.cp > 1)
            && (t.cp_exchange != crate::training::CpExchange::KvRing
                || t.framework.default_cp_exchange() != t.cp_exchange)
        {
            format!(
                "; context parallelism: {}",
                t.cp_exchange.training_words(t.framework)
            )
        } else {
            String::new()
        },
        // Per-tensor FP8's scaling, where a plan shown trains in it (it sets the casts' traffic).
        if report
            .plans
            .iter()
            .any(|e| e.plan.precision == crate::plan::Precision::Fp8)
        {
            match t.fp8_scaling {
                crate::training::Fp8Scaling::Current => {
                    "; fp8 with current scaling (amax before each cast)"
                }
                crate::training::Fp8Scaling::Delayed => "; fp8 with delayed scaling (amax history)",
            }
        } else {
            ""
        },
        // MXFP8's recipe, named as per-tensor FP8's is: block scaling, one power-of-two scale per
        // 32 consecutive elements, taken from the block itself (no amax pass): OCP Microscaling
        // Formats (MX) v1.0 §5 (MXFP8: k = 32, scale E8M0), Transformer Engine `MXFP8BlockScaling`
        // (NVIDIA/TransformerEngine@d0067d0 transformer_engine/common/recipe/__init__.py: "Each
        // group of 32 consecutive values is scaled together ... E8M0"), torchao's MX formats
        // likewise; `cost::cast::operand_bytes` counts the same scales.
        if report
            .plans
            .iter()
            .any(|e| e.plan.precision == crate::plan::Precision::Mxfp8)
        {
            "; mxfp8 with block scaling (one E8M0 scale per 32 elements, OCP MX)"
        } else {
            ""
        },
        // NVFP4's recipe, named as MXFP8's is: two-level block scaling, one E4M3 scale per 16
        // consecutive elements and one FP32 scale per tensor (NVIDIA/TransformerEngine@d0067d0
        // transformer_engine/common/recipe/__init__.py `NVFP4BlockScaling`: "each group of 16
        // consecutive values is scaled together using their own scaling factor. The type of the
        // scaling factor is E4M3 ... a global per tensor FP32 scaling factor"; NVIDIA, "Pretraining
        // Large Language Models with NVFP4", arXiv:2509.25149). What tpsim prices of it: 4.5 bits
        // an element with its block scales (`cost::cast::operand_bytes`), and one more read of each
        // input for the tensor's amax, taken after the random Hadamard transform the default
        // recipe applies (`cost::cast::input_cast_bytes`).
        if report
            .plans
            .iter()
            .any(|e| e.plan.precision == crate::plan::Precision::Nvfp4)
        {
            "; nvfp4 with two-level block scaling (one E4M3 scale per 16 elements and an FP32 scale per tensor, Transformer Engine's NVFP4BlockScaling; priced as 4.5 bits an element, plus a read of each input for its amax after the random Hadamard transform)"
        } else {
            ""
        },
    )
}

/// The layers a low-precision plan runs in bf16, as the training line says them: the stack's ends
/// (`--first-last-layers-bf16`) and the MTP layers under NVFP4 (`training::mtp_runs_bf16`).
fn bf16_layer_words(
    t: &crate::training::Training,
    plans: &[Estimate],
    model: &crate::report::ModelSummary,
) -> String {
    let b = t.bf16_layers;
    let ends = match (b.at_start, b.at_end) {
        (0, 0) => String::new(),
        (0, end) => format!("the last {} in bf16", counted(end, "layer")),
        (start, 0) => format!("the first {} in bf16", counted(start, "layer")),
        (start, end) => format!(
            "the first {start} and last {} in bf16",
            counted(end, "layer")
        ),
    };
    let mtp = model.mtp_layers > 0
        && plans.iter().any(|e| {
            crate::training::mtp_runs_bf16(
                model.layers,
                model.hybrid.is_some(),
                t.bf16_layers,
                t.framework,
                e.plan.precision,
            )
        });
    // Why the MTP layers are bf16: a transformer's take no FP4 context; a hybrid stack's block is
    // a stack of its own whose layers 0 and 1 the counts (or a quantization recipe) keep.
    let mtp_why = if model.hybrid.is_some() {
        "the MTP block, whose own layers the counts cover"
    } else {
        "the MTP layers, which Megatron-Core runs without the FP4 context"
    };
    match (ends.is_empty(), mtp) {
        (true, false) => String::new(),
        (false, false) => format!("{ends} by --first-last-layers-bf16; "),
        (true, true) if model.hybrid.is_some() => {
            "the MTP block in bf16, as its quantization recipe keeps it; ".into()
        }
        (true, true) => format!("{mtp_why} in bf16; "),
        (false, true) => format!("{ends} by --first-last-layers-bf16, and {mtp_why}; "),
    }
}

/// The bytes per parameter the shown plans keep at rest besides the gradient, as memory counts
/// them: "14", or where FP8/FP4 parameter gathers make the precision-aware optimizer keep a whole
/// fp32 master for some plans and not others, both ("8, 10 with fp8 parameter gathers").
fn bytes_at_rest_words(t: &crate::training::Training, plans: &[Estimate]) -> String {
    let states = t.optimizer_states;
    let gathers_low_precision: Vec<bool> = plans
        .iter()
        .map(|e| crate::cost::comm::fp8_parameter_gather(t, &e.plan))
        .collect();
    let without = states.bytes_at_rest(false);
    let with = states.bytes_at_rest(true);
    let any = gathers_low_precision.iter().any(|&g| g);
    let all = !gathers_low_precision.is_empty() && gathers_low_precision.iter().all(|&g| g);
    if states == crate::training::OptimizerStates::Muon {
        // Muon's one moment for the layers' weights, Adam's two for the embedding and output.
        let adam = without - states.moment_bytes() + states.adam_moment_bytes();
        format!(
            "{without} bytes per parameter of the layers' weights, {adam} of the embedding and output layer"
        )
    } else if with == without || !any {
        format!("{without} bytes per parameter")
    } else if all {
        format!("{with} bytes per parameter")
    } else {
        format!("{without} bytes per parameter, {with} with low-precision parameter gathers")
    }
}

/// How the MoE all-to-alls move tokens, for the header of an MoE model.
fn moe_dispatch_words(dispatch: crate::training::MoeDispatch) -> String {
    use crate::training::MoeDispatcher;
    match dispatch.dispatcher {
        MoeDispatcher::Alltoall => {
            "; MoE dispatch: all-to-all, a copy per routed expert".to_string()
        }
        MoeDispatcher::Deepep => format!(
            "; MoE dispatch: DeepEP, a copy per GPU holding any of the token's experts ({} routing)",
            dispatch.routing.as_str()
        ),
    }
}

/// The ranked plans as a terminal table, every column (for pipes and files).
pub fn plans_table(plans: &[Estimate], show_time_to_train: bool) -> String {
    plans_table_fitted(plans, show_time_to_train, None)
}

/// Columns given up, in this order, when the table is wider than the terminal: the exposed
/// communication split and the micro-batch count first (`eval` shows them), the headline numbers
/// (plan degrees, memory, step time, MFU) never. Numbers are never wrapped or cut.
const DROP_ORDER: [&str; 13] = [
    "DP s", "EP s", "PP s", "CP s", "TP s", "m", "layers", "bubble %", "sp", "zero", "prec",
    "train", "tokens/s",
];

/// The ranked plans as a terminal table no wider than `max_columns` characters when that is given
/// (a terminal's width): whole columns are left out, in `DROP_ORDER`, and a line under the table
/// names them. A cell is never wrapped, so every number reads as a number.
pub fn plans_table_fitted(
    plans: &[Estimate],
    show_time_to_train: bool,
    max_columns: Option<usize>,
) -> String {
    let mut header = vec![
        "#", "tp", "cp", "pp", "dp", "ep", "etp", "vpp", "layers", "mb", "m", "sp", "recomp",
        "zero", "prec", "mem GiB", "step s", "tokens/s", "MFU %", "bubble %", "TP s", "CP s",
        "PP s", "EP s", "DP s",
    ];
    if show_time_to_train {
        header.push("train");
    }
    // Columns of dimensions no shown plan uses stay out (a dense bf16 plan without CP reads as before).
    let unused: Vec<&str> = [
        ("cp", plans.iter().all(|e| e.plan.cp == 1)),
        // ep and etp together: `eval --etp` defaults to tp (Megatron-Core's default), so a table that
        // showed ep without etp would not say how to run its expert-parallel rows.
        (
            "ep",
            plans.iter().all(|e| e.plan.ep == 1 && e.plan.etp == 1),
        ),
        (
            "etp",
            plans.iter().all(|e| e.plan.ep == 1 && e.plan.etp == 1),
        ),
        // Layers per stage (first/middle/last) only when a shown plan has a first/last split,
        // given or tpsim's own.
        (
            "layers",
            plans
                .iter()
                .all(|e| !e.plan.stages.is_first_last(e.plan.pp, e.plan.vpp)),
        ),
        (
            "prec",
            plans
                .iter()
                .all(|e| e.plan.precision == crate::plan::Precision::Bf16),
        ),
        ("CP s", plans.iter().all(|e| e.plan.cp == 1)),
        (
            "EP s",
            plans.iter().all(|e| e.plan.ep == 1 && e.plan.etp == 1),
        ),
    ]
    .into_iter()
    .filter_map(|(name, unused)| unused.then_some(name))
    .collect();
    let rows: Vec<Vec<String>> = plans
        .iter()
        .enumerate()
        .map(|(rank, e)| {
            let p = &e.plan;
            let t = &e.time;
            let mut row = vec![
                (rank + 1).to_string(),
                p.tp.to_string(),
                p.cp.to_string(),
                p.pp.to_string(),
                p.dp.to_string(),
                p.ep.to_string(),
                p.etp.to_string(),
                p.vpp.to_string(),
                stage_layers_label(p),
                p.micro_batch.to_string(),
                p.num_microbatches.to_string(),
                if p.sequence_parallel { "yes" } else { "no" }.to_string(),
                recompute_label(p),
                zero_label(p),
                p.precision.as_str().to_string(),
                format!(
                    "{}/{}",
                    gib(e.memory.total_bytes.0),
                    gib(e.memory.capacity_bytes.0)
                ),
                crate::units::show_step_s(t.step_s.0),
                // As `eval`'s throughput line: a positive rate is never shown as 0.
                crate::units::show_measured(e.tokens_per_s, 0),
                crate::units::show_measured(e.mfu * 100.0, 1),
                format!("{:.1}", e.bubble_share * 100.0),
                format!("{:.2}", t.tp_comm_exposed_s.0),
                format!("{:.2}", t.cp_comm_exposed_s.0),
                format!("{:.2}", t.pp_comm_exposed_s.0),
                format!("{:.2}", t.ep_comm_exposed_s.0),
                format!("{:.2}", t.dp_comm_exposed_s.0),
            ];
            if show_time_to_train {
                row.push(e.time_to_train_s.map(duration).unwrap_or_default());
            }
            row
        })
        .collect();
    let render = |hidden: &[&str]| -> String {
        let keep: Vec<usize> = (0..header.len())
            .filter(|&i| !hidden.contains(&header[i]))
            .collect();
        let mut table = Table::new();
        table
            .load_style(UTF8_FULL_CONDENSED)
            .set_content_arrangement(ContentArrangement::Disabled);
        table.set_header(keep.iter().map(|&i| header[i]));
        for row in &rows {
            table.add_row(
                keep.iter()
                    .map(|&i| Cell::new(&row[i]).set_alignment(CellAlignment::Right)),
            );
        }
        table.to_string()
    };
    let widest = |text: &str| text.lines().map(|l| l.chars().count()).max().unwrap_or(0);
    let full = render(&unused);
    let Some(max_columns) = max_columns else {
        return full;
    };
    let full_width = widest(&full);
    let mut hidden: Vec<&str> = unused.clone();
    let mut text = full;
    for column in DROP_ORDER {
        if widest(&text) <= max_columns {
            break;
        }
        if header.contains(&column) {
            hidden.push(column);
            text = render(&hidden);
        }
    }
    let dropped: Vec<&str> = hidden
        .iter()
        .copied()
        .filter(|c| !unused.contains(c))
        .collect();
    if !dropped.is_empty() {
        text.push_str(&format!(
            "\nleft out to fit {max_columns} columns: {}; the whole table needs {full_width} (or a pipe)",
            dropped.join(", ")
        ));
    }
    text
}

/// "1 sequence", "1536 sequences".
pub fn sequences(count: u32) -> String {
    counted(count, "sequence")
}

/// `count` `noun`s: "1 layer", "80 layers", "1 micro-batch", "64 micro-batches".
pub fn counted(count: u32, noun: &str) -> String {
    if count == 1 {
        format!("1 {noun}")
    } else if noun.ends_with("ch") || noun.ends_with('s') || noun.ends_with('x') {
        format!("{count} {noun}es")
    } else {
        format!("{count} {noun}s")
    }
}

/// Tokens one step of `plan` trains on: its global batch of `training.seq_len`-token sequences.
pub fn tokens_per_step(
    plan: &crate::plan::ParallelPlan,
    training: &crate::training::Training,
) -> f64 {
    f64::from(plan.global_batch) * f64::from(training.seq_len)
}

/// What a time to train rests on, as `eval`'s line, `plan`'s train column and `--emit`'s note say
/// it: "15.00T tokens in 2384186 steps of 6.3M tokens" (whole steps, as `cost::evaluate` counts
/// them: a budget that is not a multiple of a step's tokens takes one step more).
pub fn train_basis(
    tokens: f64,
    plan: &crate::plan::ParallelPlan,
    training: &crate::training::Training,
) -> String {
    format!(
        "{} in {}",
        crate::units::token_count_words(tokens),
        train_steps(tokens, plan, training)
    )
}

/// The steps a token budget takes, in words: "2384186 steps of 6.3M tokens" ([`train_basis`]).
pub fn train_steps(
    tokens: f64,
    plan: &crate::plan::ParallelPlan,
    training: &crate::training::Training,
) -> String {
    steps_of_tokens(tokens, tokens_per_step(plan, training))
}

/// [`train_steps`] for steps of `per_step` tokens (a global batch times a sequence length), for
/// `sweep`, whose points hold those and no plan.
pub fn steps_of_tokens(tokens: f64, per_step: f64) -> String {
    let steps = (tokens / per_step).ceil().max(1.0);
    format!(
        "{} of {} tokens",
        if steps == 1.0 {
            "1 step".to_string()
        } else {
            format!("{steps:.0} steps")
        },
        crate::units::tokens_in_words(per_step)
    )
}

/// The layers of the stage whose time sets the step, as the breakdown's communication heading names
/// them: "4 transformer layers", or on a last stage that runs MTP layers beside its decoder layers
/// "1 transformer layer and 1 MTP layer" (the count the per-layer traffic is multiplied by).
/// A hybrid stack's stage holds its own slice of the pattern (`Estimate::slowest_stage_run`):
/// its layers are Mamba, attention, MLP and MoE blocks, not transformer layers, and which of them
/// it holds is what set its time, so they are named.
pub fn slowest_stage_layer_words(e: &Estimate) -> String {
    let mtp = e.slowest_stage_mtp_layers;
    let decoder = match e.slowest_stage_run {
        Some(run) => {
            let c = run.counts;
            let blocks: Vec<String> = [
                (c.mamba, "Mamba"),
                (c.attention, "attention"),
                (c.mlp, "MLP"),
                (c.moe, "MoE"),
            ]
            .into_iter()
            .filter(|(n, _)| *n > 0)
            .map(|(n, what)| format!("{n} {what}"))
            .collect();
            format!(
                "{} of the hybrid pattern ({})",
                counted(c.layers(), "layer"),
                blocks.join(", ")
            )
        }
        None => counted(e.slowest_stage_layers - mtp, "transformer layer"),
    };
    match mtp {
        0 => decoder,
        n => format!("{decoder} and {}", counted(n, "MTP layer")),
    }
}

/// The layers column: first/middle/last stage's transformer layers, first/last with two stages
/// (no middle one), "-" without a pipeline.
pub fn stage_layers_label(p: &crate::plan::ParallelPlan) -> String {
    match p.pp {
        1 => "-".to_string(),
        2 => format!("{}/{}", p.stages.first, p.stages.last),
        _ => format!(
            "{}/{}/{}",
            p.stages.first, p.stages.middle_max, p.stages.last
        ),
    }
}

/// The zero column: the stage, and "3 keep" where ZeRO-3 keeps the gathered parameters from the
/// forward to the backward (FSDP2 `reshard_after_forward=False`), which changes memory and traffic.
/// With several copies of the sharded states, "xN" follows: "1 x4" is ZeRO-1 kept in 4 copies.
pub fn zero_label(p: &crate::plan::ParallelPlan) -> String {
    zero_stage_label(p.zero, p.reshard_after_forward, p.dp_replicas)
}

/// [`zero_label`] from its parts, for what holds a plan's settings without the plan (`sweep`'s
/// and `compare`'s plan cells): "2", "3 keep", "1 x4".
pub fn zero_stage_label(zero: u8, reshard_after_forward: bool, dp_replicas: u32) -> String {
    let stage = if zero == 3 && !reshard_after_forward {
        "3 keep".to_string()
    } else {
        zero.to_string()
    };
    if dp_replicas > 1 {
        format!("{stage} x{dp_replicas}")
    } else {
        stage
    }
}

/// The lines under a plan table that say what "3 keep" and "xN" mean, when a shown plan has them.
pub fn zero_keep_note(plans: &[Estimate]) -> Option<String> {
    let keep = plans
        .iter()
        .any(|e| e.plan.zero == 3 && !e.plan.reshard_after_forward)
        .then(|| {
            "zero \"3 keep\": ZeRO-3 keeps the gathered parameters from the forward until the backward (FSDP2 reshard_after_forward=False; eval --zero 3 --reshard-after-forward false)".to_string()
        });
    let replicas = plans.iter().any(|e| e.plan.dp_replicas > 1).then(|| {
        "zero \"xN\": the sharded states are kept in N copies, each sharded over dp x cp / N ranks inside one NVLink domain or as few as can hold it, the copies all-reducing their gradient shards (hybrid sharding: Megatron-Core --num-distributed-optimizer-instances N, torchtitan HSDP; eval --dp-replicas N)".to_string()
    });
    match (keep, replicas) {
        (Some(k), Some(r)) => Some(format!("{k}\n{r}")),
        (k, r) => k.or(r),
    }
}

/// The line under a plan table that says what MFU is measured against, when any shown plan runs
/// its GEMMs below bf16: MFU is model FLOPs over the GPU's bf16 peak (`cost::evaluate`;
/// `GpuProfile::peak_flops`), the convention that keeps plans of different precisions on one scale,
/// so an FP8 or NVFP4 plan can pass 100%. None for bf16-only tables, which read as before.
pub fn mfu_note(plans: &[Estimate], peak_flops: f64) -> Option<String> {
    let low: Vec<&str> = crate::plan::Precision::ALL
        .into_iter()
        .filter(|&precision| {
            precision != crate::plan::Precision::Bf16
                && plans.iter().any(|e| e.plan.precision == precision)
        })
        .map(|precision| precision.as_str())
        .collect();
    (!low.is_empty()).then(|| {
        format!(
            "MFU % is model FLOPs over the bf16 peak ({} TFLOP/s per GPU), so {} plans can pass 100%",
            tflops(peak_flops),
            low.join(" and ")
        )
    })
}

/// What hides the TP term without TP comm overlap, as the plan runs it (`cost::unit_costs`): the
/// re-gather of the sequence-parallel inputs under the dgrad GEMMs where the backward gathers them
/// again (`cost::sp_regathers_in_backward`), and the column-parallel input gradients' collective
/// under the wgrad GEMMs, a reduce-scatter under sequence parallelism and an all-reduce without,
/// in every linear where Megatron-Core issues it asynchronously
/// (`cost::column_grad_collective_async`), else in the output layer only where the framework
/// does (`TrainingFramework::output_layer_grad_collectives_async`).
fn backward_async_words(
    training: &crate::training::Training,
    plan: &crate::plan::ParallelPlan,
) -> String {
    let gradient = if plan.sequence_parallel {
        "reduce-scatter"
    } else {
        "all-reduce"
    };
    let mut hidden = Vec::new();
    if crate::cost::sp_regathers_in_backward(training, plan) {
        hidden.push("the sequence-parallel inputs' re-gather under the dgrad GEMMs".to_string());
    }
    if crate::cost::column_grad_collective_async(training, plan) {
        hidden.push(format!(
            "Megatron-Core's column-parallel input gradients' {gradient} under their wgrad GEMMs"
        ));
    } else if training.framework.output_layer_grad_collectives_async() {
        hidden.push(format!(
            "the output layer's input-gradient {gradient} under its wgrad GEMM"
        ));
    }
    // Under --delay-wgrad-compute the layers' input gradients wait at once
    // (`cost::column_grad_collective_async`): said, so their absence above reads as meant.
    let delayed = if training.delay_wgrad_compute
        && plan.tp > 1
        && training.framework == crate::training::TrainingFramework::MegatronCore
    {
        "; --delay-wgrad-compute: the layers' input gradients waited on at once"
    } else {
        ""
    };
    if hidden.is_empty() {
        return format!("the backward's GEMMs (TP comm overlap is off{delayed})");
    }
    format!(
        "the backward's GEMMs (issued asynchronously: {}; TP comm overlap is off{delayed})",
        hidden.join(", ")
    )
}

/// What hides a context-parallel exchange, as `eval`'s CP comm line and "why the best plan" say
/// it (`cost::evaluate` sets it by exchange: the K/V ring's steps under the attention blocks they
/// feed, PyTorch's under the diagonal step's and each backward step's).
fn cp_hidden_by_words(hidden_by: crate::cost::terms::HiddenBy) -> &'static str {
    use crate::cost::terms::HiddenBy;
    match hidden_by {
        HiddenBy::AttentionBlocks => "the attention blocks of each ring step",
        HiddenBy::DiagonalAttentionStep => {
            "the diagonal step's attention (the K/V all-gather) and each backward step's (the dK/dV hops)"
        }
        _ => "",
    }
}

/// What a term's line says: its full time and what hid the rest.
fn term_note(
    term: &crate::cost::terms::Term,
    training: &crate::training::Training,
    plan: &crate::plan::ParallelPlan,
) -> String {
    use crate::cost::terms::{HiddenBy, TermKind};
    let states = training.optimizer_states;
    let hidden = term.time_s.0 - term.exposed_s.0;
    let what = match term.kind {
        TermKind::Compute => "GEMMs + element-wise kernels of the slowest stage, incl. recompute",
        TermKind::Bubble => "pipeline fill and drain (and waiting for slower stages)",
        // Muon's TP gathers are priced inside this term (`evaluate::muon_step`), not in the TP
        // line above: their bytes are said here, and there are none without (expert) TP.
        TermKind::Optimizer
            if states == crate::training::OptimizerStates::Muon && term.wire_bytes.0 > 0.0 =>
        {
            return format!(
                "Muon: Newton-Schulz on the weights this GPU updates, each gathered whole over (expert) TP in fp32 ({:.2} GB, not in the TP line), then the update",
                term.wire_bytes.0 / 1e9
            );
        }
        TermKind::Optimizer if states == crate::training::OptimizerStates::Muon => {
            "Muon: Newton-Schulz on the weights this GPU updates, then the update"
        }
        TermKind::Optimizer => "Adam, memory-bound",
        _ => "",
    };
    if !what.is_empty() {
        return what.to_string();
    }
    let backward_words;
    let by = match term.hidden_by {
        HiddenBy::Nothing => return format!("of {:.3} s, nothing hides it", term.time_s.0),
        HiddenBy::NeighbouringGemms => "the neighbouring GEMMs (TP comm overlap)",
        HiddenBy::DgradGemms => {
            backward_words = backward_async_words(training, plan);
            &backward_words
        }
        HiddenBy::AttentionBlocks | HiddenBy::DiagonalAttentionStep => {
            cp_hidden_by_words(term.hidden_by)
        }
        HiddenBy::Backward => "the backward pass (bucketed reduction)",
        HiddenBy::Forward => "the forward pass (prefetched gathers)",
        HiddenBy::PipelineCompute => "other chunks' compute (interleaved schedule)",
        HiddenBy::OtherMicroBatch => "the paired micro-batch's compute (combined 1F1B, EP overlap)",
        // Copy engines move the activations, not the SMs: no overlap penalty is charged.
        HiddenBy::LayerCompute => {
            return format!(
                "of {:.3} s (both directions); {:.3} s hidden by the next layers' forward and backward (copy engines beside them)",
                term.time_s.0,
                hidden.max(0.0)
            );
        }
    };
    // The exposed time is what the window cannot cover plus the penalty on what it does
    // (`cost::exposed_under`): said, so the 15% does not read as a charge on top of it.
    format!(
        "of {:.3} s; {:.3} s hidden by {by} (the exposed part counts {:.0}% of the traffic run under compute, for the SMs it takes)",
        term.time_s.0,
        hidden.max(0.0),
        crate::cost::OVERLAP_COMPUTE_PENALTY * 100.0
    )
}

/// The communication a framework overlaps, in a few words, true of the shown `plans`: TP comm
/// overlap applies only with tp > 1 and sequence parallelism (Megatron-LM arguments.py; the cost
/// model's rule, `cost::tp_overlap_on`), so when no shown plan has both the line says so instead
/// of claiming it.
fn overlap_words(
    training: &crate::training::Training,
    plans: &[Estimate],
    model: &super::ModelSummary,
) -> String {
    let o = &training.overlap;
    // What takes effect for at least one shown plan (`cost::overlap_applied`, the estimate's
    // rules); with no plan shown, what was asked for.
    let applied = |e: &Estimate| {
        crate::cost::overlap_applied(model.moe.is_some(), model.mtp_layers, training, &e.plan)
    };
    let any = |switch: fn(&crate::training::Overlap) -> bool| {
        plans.is_empty() || plans.iter().any(|e| switch(&applied(e)))
    };
    let tp_overlap_moot = o.tp_comm && !any(|a| a.tp_comm);
    // Megatron-Core's MoE all-to-all overlap needs ep > 1, no full recompute, virtual stages with
    // a pipeline and at most one MTP layer (`cost::moe::alltoall_overlap_refusal`).
    let moe_refusal = |e: &Estimate| {
        crate::cost::moe::alltoall_overlap_refusal_of(
            model.moe.is_some(),
            model.mtp_layers,
            crate::cost::moe::recomputes_moe_layer(training.recompute_modules, &e.plan),
            &e.plan,
        )
    };
    let moe_overlap_moot = o.moe_a2a && !any(|a| a.moe_a2a);
    // The distributed optimizer's parameter all-gather exists only where parameters or optimizer
    // states are sharded over more than one data-parallel rank (ZeRO ≥ 1, dp × cp > 1).
    let param_gather_moot = o.param_gather && !any(|a| a.param_gather);
    // Gradient reduction over one data-parallel rank and pipeline sends without interleaving are
    // not there to overlap: left out of the list without a word.
    let words = overlapped_words(&crate::training::Overlap {
        tp_comm: o.tp_comm && !tp_overlap_moot,
        grad_reduce: o.grad_reduce && any(|a| a.grad_reduce),
        param_gather: o.param_gather && !param_gather_moot,
        p2p: o.p2p && any(|a| a.p2p),
        moe_a2a: o.moe_a2a && !moe_overlap_moot,
    });
    let words = if param_gather_moot {
        format!(
            "{words}; param gather overlap unused: with ZeRO-0 or one data-parallel rank no parameters are gathered"
        )
    } else {
        words
    };
    let words = match plans {
        [only] if moe_overlap_moot => format!(
            "{words}; MoE all-to-all overlap unused: {}",
            moe_refusal(only)
                .map(|why| why.to_string())
                .unwrap_or_default()
        ),
        _ if moe_overlap_moot => {
            format!("{words}; MoE all-to-all overlap unused: no shown plan can use it")
        }
        _ => words,
    };
    if !tp_overlap_moot {
        return words;
    }
    match plans {
        [only] if only.plan.tp == 1 => {
            format!("{words}; TP comm overlap unused: the plan has tp 1")
        }
        [_] => format!(
            "{words}; TP comm not overlapped: the plan has no sequence parallelism, which TP comm overlap needs"
        ),
        _ => format!(
            "{words}; TP comm overlap unused: no shown plan has tp > 1 with sequence parallelism, which it needs"
        ),
    }
}

fn overlapped_words(o: &crate::training::Overlap) -> String {
    let on: Vec<&str> = [
        (o.tp_comm, "TP comm"),
        (o.grad_reduce, "grad reduce"),
        (o.param_gather, "param gather"),
        (o.p2p, "interleaved p2p"),
        (o.moe_a2a, "MoE all-to-all (combined 1F1B)"),
    ]
    .into_iter()
    .filter_map(|(on, name)| on.then_some(name))
    .collect();
    if on.is_empty() {
        "no communication overlapped".into()
    } else {
        format!("overlaps {}", on.join(", "))
    }
}

/// Recompute as the table shows it: none, selective, full, or full N/L for Megatron's block method
/// (N of each chunk's L layers).
pub fn recompute_label(p: &crate::plan::ParallelPlan) -> String {
    if p.recompute == crate::plan::Recompute::Full && p.recompute_num_layers > 0 {
        format!("full {}/{}", p.recompute_num_layers, p.layers_per_chunk())
    } else {
        p.recompute.as_str().to_string()
    }
}

/// The plan as `eval`'s "plan:" line describes it (degrees, micro-batches, sequence parallelism,
/// recompute, ZeRO, GEMM precision); `--emit`'s header names the plan it writes with the same words.
pub fn plan_words(p: &crate::plan::ParallelPlan) -> String {
    plan_words_of(p, false)
}

/// [`plan_words`] of a plan of a model with experts (`moe`) or without: a mixture-of-experts
/// plan names its expert degrees at 1 too, so `eval`'s plan line says expert parallelism was
/// left off rather than saying nothing of it.
pub fn plan_words_of(p: &crate::plan::ParallelPlan, moe: bool) -> String {
    format!(
        "tp {} x cp {} x pp {} x dp {} (vpp {}){}, micro-batch {} x {}{} = {}, sequence parallel {}, recompute {}, ZeRO-{}{}, {} GEMMs",
        p.tp,
        p.cp,
        p.pp,
        p.dp,
        p.vpp,
        if moe || p.ep > 1 || p.etp > 1 {
            format!(
                ", experts: ep {} x etp {} x expert-dp {}",
                p.ep,
                p.etp,
                crate::cost::moe::expert_dp(p)
            )
        } else {
            String::new()
        },
        p.micro_batch,
        counted(p.num_microbatches, "micro-batch"),
        if p.schedule_runs > 1 && p.pp > 1 {
            format!(
                " in {} pipeline schedules of {} (the local batch: one schedule per gradient-accumulation step)",
                p.schedule_runs,
                p.microbatches_per_schedule()
            )
        } else if p.schedule_runs > 1 {
            format!(
                " in {} gradient-accumulation steps of {} (the local batch)",
                p.schedule_runs,
                p.microbatches_per_schedule()
            )
        } else {
            String::new()
        },
        counted(p.global_batch, "sequence"),
        if p.sequence_parallel { "on" } else { "off" },
        recompute_label(p),
        p.zero,
        match (p.zero == 3 && !p.reshard_after_forward, p.dp_replicas > 1) {
            (true, true) => format!(
                " (no resharding after forward; {} copies of the sharded states, each over {} ranks)",
                p.dp_replicas,
                p.zero_shard_ranks()
            ),
            (true, false) => " (no resharding after forward)".to_string(),
            (false, true) => format!(
                " ({} copies of the sharded states, each over {} ranks)",
                p.dp_replicas,
                p.zero_shard_ranks()
            ),
            (false, false) => String::new(),
        },
        p.precision.as_str()
    )
}

/// The memory parts of a plan in GiB as `eval` and `compare` print them, adding up to the printed
/// total (each rounded alone, "other" the rest: `units::shown_gib_parts`; the JSON keeps the
/// bytes).
pub(crate) fn shown_memory_parts(mem: &crate::cost::memory::Memory) -> Vec<(&'static str, f64)> {
    let parts = [
        mem.weights_bytes.0,
        mem.gradients_bytes.0,
        mem.optimizer_bytes.0,
        mem.activations_bytes.0,
        mem.other_bytes.0,
    ];
    ["weights", "gradients", "optimizer", "activations", "other"]
        .into_iter()
        .zip(crate::units::shown_gib_parts(&parts, mem.total_bytes.0))
        .collect()
}

/// The full breakdown of one plan; the CP line names the training's exchange (`--cp-exchange`) as
/// its framework runs it.
pub fn breakdown(
    e: &Estimate,
    model: &crate::model::Model,
    cluster: &Cluster,
    training: &crate::training::Training,
) -> String {
    let p = &e.plan;
    let mem = &e.memory;
    let t = &e.time;
    let step = t.step_s.0;
    let pct = |x: f64| 100.0 * x / step;
    let mut out = String::new();
    let _ = writeln!(out, "plan: {}", plan_words_of(p, model.moe.is_some()));
    if p.pp == 1 {
        let _ = writeln!(
            out,
            "layers: all {} on one stage (no pipeline), with the embedding and the output layer",
            p.stages.first
        );
    } else {
        let split = if p.stages.given && model.is_hybrid() {
            "first and last stage given, the middle ones sharing the rest, as the hybrid pattern's '|' segments set them".to_string()
        } else if p.stages.given {
            "first and last stage set as --decoder-first/last-pipeline-num-layers would, the middle ones sharing the rest".to_string()
        } else if let Some((light, heavier)) = p.balanced_chunk_layers() {
            format!(
                "even split, each stage's {} in {} chunks: {heavier} of {} layers, then {} of {light}",
                light * p.vpp + heavier,
                p.vpp,
                light + 1,
                p.vpp - heavier,
            )
        } else if p.stages.even {
            "even split".to_string()
        } else if p.stages.chunk_layers > 0 {
            let chunks = p.pp * p.vpp;
            format!(
                "uneven split: {} model chunks of {} layers in depth order, the last one {}",
                chunks,
                p.stages.chunk_layers,
                p.stages.last - p.stages.chunk_layers * (p.vpp - 1)
            )
        } else if let crate::emit::MegatronSplit::FirstLast { .. } =
            crate::emit::MegatronSplit::of(model, p)
        {
            // Where the units do not split evenly, Megatron-LM's --account-for-* switches do not
            // place these layers: the launch line gives the first and last stage's counts.
            "uneven split: first and last stage set as --decoder-first/last-pipeline-num-layers would, the middle ones sharing the rest; tpsim's own balance, weighing the embedding and the output layer as one layer each".to_string()
        } else {
            "uneven split: embedding and output layer count as one layer each".to_string()
        };
        if training.pp_schedule.v_kind().is_some() {
            // A V places model chunks r and 2p − 1 − r on GPU r (`cost::v_schedule`): the first
            // GPU holds both ends of the model, the others two middle chunks each.
            let per_gpu = crate::cost::pipeline::v_rank_layers(model, p);
            let rest = &per_gpu[1..];
            let (lo, hi) = (
                rest.iter().copied().min().unwrap_or(0),
                rest.iter().copied().max().unwrap_or(0),
            );
            let _ = writeln!(
                out,
                "layers per GPU in the V (GPU r runs model chunks r and {} - r): first {}, {} {} ({split}); embedding, output layer{} and loss on the first GPU",
                2 * p.pp - 1,
                per_gpu[0],
                if rest.len() == 1 { "other" } else { "others" },
                if lo == hi {
                    lo.to_string()
                } else {
                    format!("{lo}-{hi}")
                },
                match model.mtp_layers {
                    0 => String::new(),
                    n => format!(", {}", counted(n, "MTP layer")),
                },
            );
        } else {
            let _ = writeln!(
                out,
                "layers per stage: first {}, {}last {} ({split}); embedding on the first stage, output layer{} on the last",
                p.stages.first,
                if p.pp > 2 {
                    format!("middle {}, ", p.stages.middle_max)
                } else {
                    String::new()
                },
                p.stages.last,
                match model.mtp_layers {
                    0 => String::new(),
                    n => format!(" and {}", counted(n, "MTP layer")),
                },
            );
        }
    }
    let _ = writeln!(out);
    // A hybrid stack's middle stages each hold their own slice of the pattern: say which one.
    let rank = mem
        .middle_rank
        .map(|rank| format!(" (pipeline rank {rank} of 0-{})", e.plan.pp - 1))
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "memory per GPU (most loaded: {}{rank}, {} params before ZeRO):",
        mem.stage.words(),
        format_count(mem.params_per_gpu_before_zero)
    );
    let offloaded = training.offloaded_layers(model.layers);
    for (name, part_gib) in shown_memory_parts(mem) {
        let _ = write!(out, "  {name:<12} {:>8} GiB", format!("{part_gib:.1}"));
        if name == "activations" && offloaded > 0 {
            // What the host holds per GPU: the offloaded layers of each micro-batch in flight
            // (one at pp 1, the only layout offloading allows).
            let host_gib = mem.host_bytes.0 / crate::units::GIB;
            let _ = write!(
                out,
                "  ({offloaded} of {} layers offloaded to host memory: {host_gib:.1} GiB per GPU there; at the peak the GPU holds the other {})",
                model.layers,
                model.layers - offloaded
            );
        }
        let _ = writeln!(out);
    }
    let _ = writeln!(
        out,
        "  {:<12} {:>8} GiB of {} GiB — {}",
        "total",
        gib(mem.total_bytes.0),
        gib(mem.capacity_bytes.0),
        fit_verdict(mem.fits, mem.capacity_bytes.0, mem.total_bytes.0)
    );
    if offloaded > 0 {
        // The offloaded activations against the host memory the profile gives each GPU.
        let _ = writeln!(
            out,
            "  {:<12} {:>8} GiB of {} GiB host memory per GPU — {}",
            "offloaded",
            gib(mem.host_bytes.0),
            gib(mem.host_capacity_bytes.0),
            fit_verdict(mem.host_fits, mem.host_capacity_bytes.0, mem.host_bytes.0)
        );
    }
    let _ = writeln!(out);
    if p.pp > 1 {
        let _ = writeln!(
            out,
            "communication per GPU per step (TP, CP, PP, EP: a GPU of the slowest stage, whose {} set the step; DP: the stage with the most parameters; the ledger counts the same):",
            slowest_stage_layer_words(e)
        );
    } else {
        let _ = writeln!(out, "communication per GPU per step:");
    }
    // The DP line names its link as "why the best plan" does ("network and NVLink" where the group
    // has several ranks on each node, how they share it after the line's words); the link column
    // widens to the longest link named.
    let (dp_link, dp_detail) = dp_link_parts(e, cluster);
    let link_of = |name: &str, group: &crate::cost::comm::GroupComm| {
        if name == "DP" {
            dp_link.clone()
        } else {
            group.link.map_or("-", link_name).to_string()
        }
    };
    let link_width = [
        ("DP", &e.comm.dp),
        ("TP", &e.comm.tp),
        ("CP", &e.comm.cp),
        ("PP", &e.comm.pp),
        ("EP", &e.comm.ep),
    ]
    .iter()
    .map(|(name, group)| link_of(name, group).len())
    .max()
    .unwrap_or(0)
    .max(8);
    // A hybrid stack's CP traffic holds its Mamba mixers' all-to-alls too (`cost::hybrid`).
    let cp_words = {
        let attention = training.cp_exchange.comm_words(training.framework);
        if model.is_hybrid() {
            format!(
                "{attention} in the attention layers; in the Mamba layers z, x, B, C, dt and the scan output traded between sequence and head shards, six all-to-alls each way (the Mamba CP comm term)"
            )
        } else {
            attention.to_string()
        }
    };
    for (name, group, what) in [
        (
            "TP",
            &e.comm.tp,
            "collectives on b·s·h activations in every layer, fwd and bwd: all-reduces, or under sequence parallelism all-gathers and reduce-scatters (the report's ledger lists each)",
        ),
        (
            "CP",
            &e.comm.cp,
            // Named here: the training line names the exchange only where it departs from the
            // framework's default, so it cannot be what this line points to.
            cp_words.as_str(),
        ),
        (
            "PP",
            &e.comm.pp,
            "activations forward and gradients backward at stage boundaries",
        ),
        (
            "EP",
            &e.comm.ep,
            if p.etp > 1 {
                "MoE token all-to-alls and expert-TP gathers/scatters (fwd and bwd)"
            } else {
                "MoE token dispatch and combine all-to-alls (fwd and bwd)"
            },
        ),
        (
            "DP",
            &e.comm.dp,
            // What the ledger counts for the plan's ZeRO stage (`cost::ledger`): plain data
            // parallelism all-reduces and gathers nothing.
            match (p.zero, p.dp_replicas > 1) {
                (0, _) if crate::cost::bf16_optimizer::shards_states_at_zero0(training, p) => {
                    "gradient all-reduce and all-gather of the updated bf16 weights (ZeRO-0, but DeepSpeed's BF16_Optimizer shards its fp32 states over dp: its own ZeRO-1)"
                }
                (0, _) => "gradient all-reduce (ZeRO-0: weights not sharded, nothing gathered)",
                (1, false) => {
                    "gradient reduce-scatter and all-gather of the updated weights (ZeRO-1)"
                }
                (1, true) => {
                    "gradient reduce-scatter within a copy of the sharded states, all-reduce of each shard across the copies, all-gather of the updated weights within a copy (ZeRO-1)"
                }
                (2, false) => {
                    "gradient reduce-scatters and all-gather of the updated weights (ZeRO-2)"
                }
                (2, true) => {
                    "gradient reduce-scatters within a copy of the sharded states, all-reduces of each shard across the copies, all-gather of the updated weights within a copy (ZeRO-2)"
                }
                (_, false) => {
                    "gradient reduce-scatters and all-gathers of the sharded weights (ZeRO-3)"
                }
                (_, true) => {
                    "gradient reduce-scatters within a copy of the sharded states, all-reduces of each shard across the copies, all-gathers of the sharded weights within a copy (ZeRO-3)"
                }
            },
        ),
    ] {
        if (name == "CP" && p.cp == 1) || (name == "EP" && p.ep == 1 && p.etp == 1) {
            continue;
        }
        if name == "PP" && p.pp == 1 {
            let _ = writeln!(out, "  PP        none: pp 1, no stage boundaries");
            continue;
        }
        if name == "TP" && p.tp == 1 {
            let _ = writeln!(out, "  TP        none: tp 1, every layer whole on each GPU");
            continue;
        }
        if name == "DP" && group.link.is_none() && group.wire_bytes.0 == 0.0 {
            let _ = writeln!(
                out,
                "  DP        none: one replica, nothing to reduce or gather"
            );
            continue;
        }
        let detail = match (name, &dp_detail) {
            ("DP", Some(detail)) => format!("; {detail}"),
            _ => String::new(),
        };
        let _ = writeln!(
            out,
            "  {name}  {:>10.2} GB on {:<link_width$} {:>8.3} s   {what}{detail}",
            group.wire_bytes.gb(),
            link_of(name, group),
            group.time_s.0
        );
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "time per step: {:.3} s (the exposed part of each term)",
        step
    );
    for term in e.terms.iter() {
        if term.time_s.0 <= 0.0 && term.exposed_s.0 <= 0.0 {
            continue;
        }
        let note = term_note(term, training, &e.plan);
        let _ = writeln!(
            out,
            "  {:<15} {:>9.3} s {:>5.1}%  {note}",
            term.kind.label(),
            term.exposed_s.0,
            pct(term.exposed_s.0)
        );
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "throughput: {} tokens/s, {} model TFLOP/s per GPU{} (MFU {}%{}), {} hardware TFLOP/s per GPU (with recompute and, under FlashAttention, the QKᵀ its backward recomputes); bubble {:.1}% of the step",
        // A positive rate is never shown as 0 (a profile at the ranges' slow ends ran at 1e-12
        // tokens/s and printed "0 tokens/s, ... MFU 0.0%").
        crate::units::show_measured(e.tokens_per_s, 0),
        tflops_fine(e.model_tflops_per_gpu),
        // A mixture of experts' model FLOPs count the parameters a token uses (the model line's
        // "active"), not all of them: said, so MFU is not read against the total.
        if model.moe.is_some() {
            format!(
                " of the {} active parameters",
                format_count(model.active_params())
            )
        } else {
            String::new()
        },
        crate::units::show_measured(e.mfu * 100.0, 1),
        // MFU is always over the bf16 peak (`cost::evaluate`, the peak the scenario line prints),
        // so a plan whose GEMMs run at a lower precision can pass 100%.
        if p.precision == crate::plan::Precision::Bf16 {
            String::new()
        } else {
            format!(
                " of the bf16 peak; {} GEMMs can pass 100%",
                p.precision.as_str()
            )
        },
        tflops_fine(e.hardware_tflops_per_gpu),
        e.bubble_share * 100.0
    );
    if let (Some(seconds), Some(tokens)) = (e.time_to_train_s, training.tokens) {
        // A budget of at most one step's tokens still takes that one step (`cost::evaluate`).
        let one_step = seconds <= e.time.step_s.0 * 1.000_001;
        let _ = writeln!(
            out,
            "time to train: {} ({})",
            duration(seconds),
            if one_step {
                format!(
                    "one step: the token budget is no more than a step's {} tokens",
                    crate::units::tokens_in_words(tokens_per_step(p, training))
                )
            } else {
                format!(
                    "{} at {:.3} s per step",
                    train_basis(tokens, p, training),
                    e.time.step_s.0
                )
            }
        );
        if let (Some(cost), Some(price)) = (e.cost_to_train, training.price_per_gpu_hour) {
            let _ = writeln!(
                out,
                "cost to train: {}",
                cost_words(cost, seconds, cluster, price)
            );
        }
    }
    out
}

/// "$1,234,567 (64 GPUs for 1,234 h at $2.5 per GPU-hour)": a plan's cost to train and what it
/// multiplies (`cost::cost_to_train`), as `eval` and `plan` say it. Hours below 10 keep three
/// significant digits, so the three numbers multiply to the cost as printed: whole hours read a
/// one-step run's 4 minutes as "0 h" beside a cost that is not zero.
pub fn cost_words(cost: f64, seconds: f64, cluster: &Cluster, price: f64) -> String {
    let hours = seconds / 3600.0;
    let hours_text = if hours >= 10.0 || hours <= 0.0 || !hours.is_finite() {
        crate::sweep::thousands(hours)
    } else {
        let places = usize::try_from(2 - hours.log10().floor() as i32).unwrap_or(2);
        format!("{hours:.places$}")
    };
    format!(
        "${} ({} GPUs for {} h at ${} per GPU-hour)",
        crate::sweep::cost_text(cost),
        cluster.total_gpus(),
        hours_text,
        crate::units::show_number(price)
    )
}

/// "fits, N GiB free" or "DOES NOT FIT: misses by N GiB" of `used_bytes` in `capacity_bytes`: the
/// difference of the two numbers as printed, so the line adds up, and "under 0.1" where they print
/// alike. The memory block's GPU line and its host-memory line say it alike.
fn fit_verdict(fits: bool, capacity_bytes: f64, used_bytes: f64) -> String {
    let left_gib = crate::units::shown_gib_left(capacity_bytes, used_bytes);
    let amount = |gib: f64| {
        if gib < 0.05 {
            "under 0.1".to_string()
        } else {
            format!("{gib:.1}")
        }
    };
    if fits {
        format!("fits, {} GiB free", amount(left_gib))
    } else {
        format!("DOES NOT FIT: misses by {} GiB", amount(-left_gib))
    }
}

/// What of a plan does not fit, in words: the most loaded GPU's memory, or, where that fits, the
/// host memory its offloaded activations need (`Memory::host_fits`). `eval`, `report` and
/// `compare` say a misfit in these words.
pub fn misfit_words(memory: &crate::cost::memory::Memory) -> String {
    if memory.misses_only_host() {
        format!(
            "its offloaded activations take {:.1} GiB of host memory per GPU, which has {:.1} GiB",
            memory.host_bytes.0 / crate::units::GIB,
            memory.host_capacity_bytes.0 / crate::units::GIB
        )
    } else {
        format!(
            "{:.1} GiB of {:.1} GiB on the most loaded GPU",
            memory.total_bytes.0 / crate::units::GIB,
            memory.capacity_bytes.0 / crate::units::GIB
        )
    }
}

/// Search statistics in one line.
pub fn stats_line(stats: &SearchStats) -> String {
    let reasons: Vec<String> = stats
        .infeasible_by_reason
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    format!(
        "search: {} candidates, {} feasible, infeasible: {} — {} on {} threads",
        stats.candidates,
        stats.feasible,
        if reasons.is_empty() {
            "none".to_string()
        } else {
            reasons.join(", ")
        },
        crate::units::show_search_time(stats.elapsed_s),
        stats.threads
    )
}

/// Why the best plan looks the way it does, in the seeds' terms: TP inside a node, PP across
/// nodes, DP last.
/// `tp_pairs` is a layer's forward all-reduce equivalents on the busiest stage
/// (`cost::tp_pairs_per_layer`: 2 for a dense layer, fewer where MoE layers have no MLP pair).
/// Where the DP group's bytes go: a group across nodes with several members per node (or per
/// NVLink segment on NVL72) runs one ring per member's NIC and keeps the ring's other hops on
/// NVLink (`Cluster::group_speed`), so "on network" alone would read as every byte crossing a NIC.
fn dp_link_words(e: &Estimate, cluster: &Cluster) -> String {
    match dp_link_parts(e, cluster) {
        (link, Some(detail)) => format!("{link} ({detail})"),
        (link, None) => link,
    }
}

/// Where the DP group's traffic runs, as "why the best plan" and `eval`'s communication lines
/// both say it: the link, and where a group crossing nodes has several ranks on each, how those
/// ranks share it ("4 ranks per node, each with its own NIC; ...").
fn dp_link_parts(e: &Estimate, cluster: &Cluster) -> (String, Option<String>) {
    let Some(link) = e.comm.dp.link else {
        return ("-".to_string(), None);
    };
    let groups = crate::cost::groups::groups(cluster, &e.plan);
    let dp = groups.get(crate::cost::groups::GroupKind::Dp);
    // With one DP×CP rank the traffic is the experts' over expert-DP (`Estimate::comm`'s DP link).
    let (ring, copies) = if dp.size > 1 {
        (dp, groups.get(crate::cost::groups::GroupKind::DpReplica))
    } else {
        (
            groups.get(crate::cost::groups::GroupKind::ExpertDp),
            groups.get(crate::cost::groups::GroupKind::ExpertDpReplica),
        )
    };
    // Hybrid sharding with each copy inside an NVLink domain: `Estimate::comm` gives the DP
    // traffic the slower link, but only the all-reduce across the copies leaves the domain (the
    // ledger's `dp_replica` rows, the layout figure's legend).
    if copies.size > 1 && ring.link == Link::Nvlink && copies.link == Link::Network {
        return (
            "network and NVLink".to_string(),
            Some(format!(
                "each copy's {} ranks reduce-scatter and gather on NVLink, only the all-reduce across the {} copies crosses the network",
                ring.size, copies.size
            )),
        );
    }
    match shared_nic_ring_words(link, ring.members_per_node, cluster) {
        Some((link, detail)) => (link.to_string(), Some(detail)),
        None => (link_name(link).to_string(), None),
    }
}

/// A ring across the network with several ranks on each node (or NVLink segment on NVL72): its
/// link ("network and NVLink") and how those ranks share it; `None` for any other group. The
/// layout figure names the DP and expert-DP rings' links with the same words.
pub(crate) fn shared_nic_ring_words(
    link: Link,
    members_per_node: u32,
    cluster: &Cluster,
) -> Option<(&'static str, String)> {
    if link != Link::Network || members_per_node <= 1 {
        return None;
    }
    let block = if cluster.nvlink_domain() > cluster.gpus_per_node {
        "NVLink segment"
    } else {
        "node"
    };
    Some((
        "network and NVLink",
        format!(
            "{members_per_node} ranks per {block}, each with its own NIC; the ring's hops inside it stay on NVLink"
        ),
    ))
}

/// Where the TP group runs, from the link the cost model gave it (`Estimate::comm`): a group wider
/// than a node stays on NVLink inside a multi-node NVLink domain (NVL72's trays), so the node count
/// alone cannot say "on the network".
fn tp_place_words(e: &Estimate, cluster: &Cluster) -> &'static str {
    match (e.comm.tp.link, e.plan.tp <= cluster.gpus_per_node) {
        (Some(Link::Network), _) => "ACROSS nodes, on the network",
        (_, true) => "inside one node, on NVLink",
        (_, false) => "across nodes inside one NVLink domain, on NVLink",
    }
}

/// How the pipeline's stages sit, as the ranks are laid out (Megatron-LM's order, `cost::groups`:
/// tp fastest, then cp, then dp, so stage i holds ranks i·s to (i+1)·s − 1 with s = tp·cp·dp):
/// how many stages share a node (on NVL72 racks, an NVLink domain) and how many of the pp − 1
/// boundaries lie inside one, on NVLink, or across, on the network. Said by the placement, for
/// every placement: "stages on different nodes" read wrong where stages sit two to a node.
fn pp_place_words(e: &Estimate, cluster: &Cluster) -> String {
    let p = &e.plan;
    let domain = u64::from(cluster.nvlink_domain().max(1));
    let rack = cluster.nvlink_domain() > cluster.gpus_per_node;
    let (unit, units) = if rack {
        ("NVLink domain", "NVLink domains")
    } else {
        ("node", "nodes")
    };
    let unit_sized = if rack {
        format!("{domain}-GPU NVLink domain")
    } else {
        "node".to_string()
    };
    let boundaries = p.pp.saturating_sub(1);
    let every = if boundaries == 1 {
        "the one boundary".to_string()
    } else {
        format!("all {boundaries} boundaries")
    };
    // The cost model's own placement of the whole group: on NVLink when every stage lies in one
    // domain (`cost::groups::place`, which also keeps whole trays of one NVL72 rack together).
    if e.comm.pp.link == Some(Link::Nvlink) {
        let all = if p.pp == 2 {
            "both stages".to_string()
        } else {
            format!("all {} stages", p.pp)
        };
        return format!("{all} in one {unit_sized}, {every} on NVLink");
    }
    let stride = u64::from(p.tp) * u64::from(p.cp) * u64::from(p.dp);
    // Each boundary between stage i and i + 1: on NVLink as the cost model prices it (every copy
    // of the pipeline inside one domain, `cost::groups::pp_boundary_link`), else across for every
    // copy, or inside for some copies only (priced on the network, the slowest pair's link).
    let (mut inside, mut across, mut mixed) = (0u32, 0u32, 0u32);
    for i in 0..boundaries {
        if crate::cost::groups::pp_boundary_link(cluster, p, i) == Link::Nvlink {
            inside += 1;
            continue;
        }
        let i = u64::from(i);
        let some_inside =
            (0..stride).any(|r| (r + i * stride) / domain == (r + (i + 1) * stride) / domain);
        if some_inside {
            mixed += 1;
        } else {
            across += 1;
        }
    }
    let layout = if domain.is_multiple_of(stride) {
        match domain / stride {
            1 => format!("one stage per {unit_sized}"),
            k => format!("{k} stages per {unit_sized}"),
        }
    } else if stride.is_multiple_of(domain) {
        format!("each stage over {} {units}", stride / domain)
    } else {
        format!("stages of {stride} GPUs straddling {domain}-GPU {units}")
    };
    let mut parts: Vec<String> = Vec::new();
    // "4 of the 7 boundaries inside a node, on NVLink; 3 across nodes, on the network".
    let of = |n: u32, first: bool| {
        if n == boundaries {
            every.clone()
        } else if first {
            format!("{n} of the {boundaries} boundaries")
        } else {
            n.to_string()
        }
    };
    if inside > 0 {
        parts.push(format!(
            "{} inside a {unit}, on NVLink",
            of(inside, parts.is_empty())
        ));
    }
    if across > 0 {
        parts.push(format!(
            "{} across {units}, on the network",
            of(across, parts.is_empty())
        ));
    }
    if mixed > 0 {
        parts.push(format!(
            "{} inside a {unit} for some ranks and across {units} for the others",
            of(mixed, parts.is_empty())
        ));
    }
    format!("{layout}: {}", parts.join("; "))
}

/// `tp_pairs`: the TP all-reduce equivalents of a layer's forward (`cost::tp_pairs_per_layer`);
/// `regathers`: whether the backward gathers the column-parallel inputs again
/// (`cost::sp_regathers_in_backward`); `recompute_repeats`: whether recompute runs TP collectives
/// again (`cost::tp_recompute_repeats_collectives`); `expert_dp`: the ranks an MoE model's expert
/// gradients are reduced over (`cost::moe::expert_dp`; 1 for a dense model); `model`: the model
/// planned, whose hybrid stack (`model::hybrid`) has one block, and at most one pair, per layer;
/// `ends`: the model's ends the slowest stage runs, whose TP collectives the bytes include
/// (`cost::slowest_stage`, `cost::embedding_output_tp`).
#[allow(clippy::too_many_arguments)]
pub fn explain_best(
    e: &Estimate,
    cluster: &Cluster,
    model: &crate::model::Model,
    tp_pairs: f64,
    regathers: bool,
    recompute_repeats: bool,
    ends: crate::cost::Ends,
    expert_dp: u32,
    training: &crate::training::Training,
    ep_alternative: Option<&str>,
) -> String {
    let p = &e.plan;
    let t = &e.time;
    let step = t.step_s.0;
    let share = |x: f64| 100.0 * x / step;
    let mut out = String::from("why the best plan:\n");
    if p.tp > 1 {
        let _ = writeln!(
            out,
            "  TP {}: {} — every {}: {:.2} GB per GPU per step, {} of the step exposed",
            p.tp,
            tp_place_words(e, cluster),
            {
                let mut words = if let Some(hybrid) = &model.hybrid {
                    // Each layer of a hybrid stack is one block (`model::hybrid`), and each block
                    // with a column- then row-parallel pair runs it once forward, once backward
                    // (`cost::tp_pairs_at`).
                    let counts = hybrid.counts();
                    let pairless_moe = counts.moe > 0 && tp_pairs < 1.0 - 1e-9;
                    format!(
                        "layer (one block of the hybrid pattern: a Mamba-2 mixer, attention, an MLP or an MoE) all-reduces its b·s·h activations {:.1} times on average: twice in each block with a column- then row-parallel pair (Mamba in_proj/out_proj, attention QKV/output, the MLP's two GEMMs), once forward and once backward{}",
                        2.0 * tp_pairs,
                        if pairless_moe {
                            ", none in the MoE blocks (their experts take the sequence shard straight from the dispatcher)"
                        } else {
                            ""
                        }
                    )
                } else if tp_pairs >= 2.0 {
                    "layer all-reduces its b·s·h activations 4 times".to_string()
                } else {
                    format!(
                        "layer all-reduces its b·s·h activations {:.1} times on average (MoE layers twice: their MLP hands the sequence shard straight to the expert dispatcher)",
                        2.0 * tp_pairs
                    )
                };
                // Sequence parallelism turns each all-reduce into an all-gather and a
                // reduce-scatter whether or not the backward gathers the inputs again (torchtitan
                // keeps them, `cost::sp_regathers_in_backward`).
                if p.sequence_parallel {
                    words.push_str(" as all-gathers and reduce-scatters");
                }
                if regathers {
                    words.push_str(
                        ", and the backward gathers the column-split GEMMs' inputs again for their weight gradients",
                    );
                }
                if recompute_repeats {
                    words.push_str(" (plus what recompute repeats)");
                }
                match (ends.embedding, ends.output) {
                    (true, true) => words.push_str(
                        "; the embedding and the output layer add their own once per micro-batch",
                    ),
                    (false, true) => {
                        words.push_str("; the output layer adds its own once per micro-batch")
                    }
                    (true, false) => {
                        words.push_str("; the embedding adds its own once per micro-batch")
                    }
                    (false, false) => {}
                }
                words
            },
            e.comm.tp.wire_bytes.gb(),
            exposed_share_words(share(t.tp_comm_exposed_s.0))
        );
    } else {
        let _ = writeln!(
            out,
            "  TP 1: no tensor parallelism; each GPU holds whole layers"
        );
    }
    if p.cp > 1 {
        let _ = writeln!(
            out,
            "  CP {}: on {} — every layer {}, fwd and bwd: {:.2} GB per GPU per step, {} of the step exposed{}",
            p.cp,
            e.comm.cp.link.map_or("-", link_name),
            if training.framework == crate::training::TrainingFramework::Deepspeed {
                "trades Q, K, V and the attention output between sequence shards and head shards among the sequence-parallel ranks (DeepSpeed-Ulysses's all-to-all)"
            } else if model.is_hybrid() {
                "exchanges its keys and values (attention) or trades its Mamba mixer's inputs and scan output between sequence and head shards (Mamba) among the context-parallel ranks"
            } else {
                // The exchange the plan runs, named as `eval`'s CP line names it: "keys and
                // values" alone read as the ring under every --cp-exchange.
                use crate::training::CpExchange;
                match training.cp_exchange {
                    CpExchange::KvRing => {
                        "passes its keys and values around the ring of context-parallel ranks (Transformer Engine's K/V ring, --cp-comm-type p2p: cp − 1 point-to-point steps, dK/dV passed back in bwd)"
                    }
                    CpExchange::TorchAllGather => {
                        "all-gathers its keys and values (repeated to every query head) among the context-parallel ranks and passes fp32 dK/dV around the ring in bwd (PyTorch's context_parallel)"
                    }
                    CpExchange::KvAllGather => {
                        "all-gathers its keys and values among the context-parallel ranks and reduce-scatters dK/dV in bwd (Transformer Engine's all_gather)"
                    }
                    CpExchange::HeadAllToAll => {
                        "trades Q, K, V and the attention output between sequence shards and head shards among the context-parallel ranks (Transformer Engine's all-to-all over heads, a2a)"
                    }
                }
            },
            e.comm.cp.wire_bytes.gb(),
            exposed_share_words(share(t.cp_comm_exposed_s.0)),
            {
                // What hides the rest, or that nothing does (`eval`'s CP comm line, the same term).
                // A hybrid stack's Mamba exchange is a term of its own: left to `eval`.
                let term = e.terms.get(TermKind::CpComm);
                let hidden = term.time_s.0 - term.exposed_s.0;
                match cp_hidden_by_words(term.hidden_by) {
                    _ if model.is_hybrid() => String::new(),
                    "" if term.time_s.0 > 0.0 => {
                        format!("; nothing hides its {:.2} s", term.time_s.0)
                    }
                    "" => String::new(),
                    by => format!(
                        "; {:.2} of its {:.2} s hidden by {by}",
                        hidden.max(0.0),
                        term.time_s.0
                    ),
                }
            }
        );
    }
    if p.ep > 1 || p.etp > 1 {
        let _ = writeln!(
            out,
            "  EP {}{}: on {} — {}every MoE layer {}, fwd and bwd: {:.2} GB per GPU per step, {} of the step exposed",
            p.ep,
            if p.etp > 1 {
                format!(" x ETP {}", p.etp)
            } else {
                String::new()
            },
            e.comm.ep.link.map_or("-", link_name),
            // What EP buys: each GPU holds experts / ep of every MoE layer's routed experts (the
            // weights, gradients and optimizer states of the rest live on the other EP ranks).
            match &model.moe {
                Some(moe) if p.ep > 1 => format!(
                    "each GPU holds {} of each MoE layer's {} routed experts{}; ",
                    moe.experts / p.ep,
                    moe.experts,
                    if p.etp > 1 {
                        format!(", each split over {} GPUs", p.etp)
                    } else {
                        String::new()
                    }
                ),
                _ => String::new(),
            },
            match (p.ep > 1, p.etp > 1) {
                (true, true) =>
                    "sends its routed tokens to their experts and back with all-to-alls, and gathers and reduce-scatters them over the expert-TP ranks",
                (true, false) =>
                    "sends its routed tokens to their experts and back with all-to-alls",
                _ =>
                    "gathers its routed tokens over the expert-TP ranks and reduce-scatters the experts' outputs",
            },
            e.comm.ep.wire_bytes.gb(),
            exposed_share_words(share(t.ep_comm_exposed_s.0))
        );
    }
    // An MoE model at EP 1 is said as TP 1 is, with what the fastest plan that splits the experts
    // would have cost (`ep_alternative`, from the search): without it, a plan of an MoE model
    // never named expert parallelism, and a reader could not tell it was considered.
    if p.ep == 1
        && p.etp == 1
        && let Some(moe) = &model.moe
    {
        let _ = writeln!(
            out,
            "  EP 1: no expert parallelism; each GPU holds all {} routed experts of every MoE layer and no all-to-all moves its tokens{}",
            moe.experts,
            ep_alternative
                .map(|words| format!(" — {words}"))
                .unwrap_or_default()
        );
    }
    if p.pp > 1 {
        let _ = writeln!(
            out,
            "  PP {}: {} — {} ({:.2} GB per GPU per step); pipeline bubble {:.1}% of the step ({}ratio {} = {:.3} with v={}, {})",
            p.pp,
            pp_place_words(e, cluster),
            // The PP term's bytes hold the embedding gradient's all-reduce where the last stage
            // keeps a copy (`cost::embedding_grad_sync`), so the words name it.
            if crate::cost::embedding_grad_sync::last_stage_holds_embedding_copy(model, training, p)
            {
                if model.tied_embeddings {
                    "stage-boundary activations move, and once a step the tied word embedding's gradient is all-reduced between the first and the last stage"
                } else {
                    "stage-boundary activations move, and once a step the word embedding's gradient is all-reduced between the first stage and the last, whose multi-token prediction keeps a copy"
                }
            } else {
                "only stage-boundary activations move"
            },
            e.comm.pp.wire_bytes.gb(),
            e.bubble_share * 100.0,
            // "ratio (p-1)/(v·m) = 0.003", or "ZB-V ratio from the schedule at mean chunks = 0.043".
            match training.pp_schedule {
                crate::training::PipelineSchedule::OneFOneB => String::new(),
                schedule => format!("{} ", schedule.words(p.vpp)),
            },
            match training.pp_schedule {
                crate::training::PipelineSchedule::OneFOneB => {
                    training.pp_schedule.closed_form_words().to_string()
                }
                schedule => format!("from {}", schedule.closed_form_words()),
            },
            e.bubble_ratio,
            p.vpp,
            p.schedule_m_words()
        );
        if p.stages.is_first_last(p.pp, p.vpp) {
            let middle = if p.pp > 2 {
                format!("middle {}, ", p.stages.middle_max)
            } else {
                String::new()
            };
            // tpsim's own split, as the launch line writes it.
            let which = if p.stages.given {
                "the first/last split with the fastest step".to_string()
            } else {
                match crate::emit::MegatronSplit::of(model, p) {
                    crate::emit::MegatronSplit::EmbeddingAndLossCounted => "tpsim's own split, the embedding and the output layer counted as one layer each (--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split)".to_string(),
                    crate::emit::MegatronSplit::FirstLast { first, last } => format!(
                        "tpsim's own split, weighing the embedding and the output layer as one layer each (--decoder-first-pipeline-num-layers {first} --decoder-last-pipeline-num-layers {last})"
                    ),
                    _ => "tpsim's own split, weighing the embedding and the output layer as one layer each".to_string(),
                }
            };
            let flags = if model.is_hybrid() {
                // A hybrid stack's split is the pattern's '|' segments (Megatron-LM refuses the
                // first/last flags beside them).
                " (the '|' segments of --hybrid-layer-pattern, as --emit megatron writes them)"
                    .to_string()
            } else if p.stages.given {
                format!(
                    " (--decoder-first-pipeline-num-layers {} --decoder-last-pipeline-num-layers {})",
                    p.stages.first, p.stages.last
                )
            } else {
                String::new()
            };
            let _ = writeln!(
                out,
                "    layers per stage: first {}, {middle}last {} — {which}{flags}; the last stage also runs the output layer and any MTP layers",
                p.stages.first, p.stages.last,
            );
        }
    } else {
        let _ = writeln!(out, "  PP 1: no pipeline; no bubble");
    }
    // An MoE model's expert gradients are reduced over expert-DP (`cost::moe`), which has ranks
    // where DP×CP has one (tp 8, ep 2 on 16 GPUs: DP 1, expert-DP 4): the line says so and gives
    // the traffic, instead of "a single replica; no gradient traffic".
    if p.dp * p.cp > 1 || expert_dp > 1 {
        // Gradients are reduced over DP and CP together (Megatron-Core's data-parallel group with
        // context parallelism), so CP alone still reduces them.
        let group = if p.cp > 1 {
            format!(
                "DP {} x CP {} ({} ranks reduce gradients)",
                p.dp,
                p.cp,
                p.dp * p.cp
            )
        } else {
            format!("DP {}", p.dp)
        };
        // Where DP×CP has ranks too, the link after the line's bytes is that group's, so the
        // expert-DP group names its own (tp 2, ep 32 on 8-GPU nodes: DP 64 with 4 ranks per node,
        // expert-DP 4 with one).
        // (With ep·etp = tp the expert-DP group is DP×CP itself: nothing to add.)
        let group = match (expert_dp > 1 && p.ep * p.etp != p.tp, p.dp * p.cp > 1) {
            (true, true) => {
                let groups = crate::cost::groups::groups(cluster, p);
                let experts = groups.get(crate::cost::groups::GroupKind::ExpertDp);
                let link = shared_nic_ring_words(experts.link, experts.members_per_node, cluster)
                    .map_or(link_name(experts.link), |(link, _)| link);
                format!("{group} (experts over expert-DP {expert_dp}, on {link})")
            }
            (true, false) => format!("{group} (experts over expert-DP {expert_dp})"),
            (false, _) => group,
        };
        let group = if p.dp_replicas > 1 {
            format!(
                "{group}, the sharded states in {} copies of {} ranks,",
                p.dp_replicas,
                p.zero_shard_ranks()
            )
        } else {
            group
        };
        // DeepSpeed's BF16_Optimizer at ZeRO-0 shards its fp32 states all the same, as the
        // breakdown's DP line says (`bf16_optimizer::shards_states_at_zero0`).
        let zero = if crate::cost::bf16_optimizer::shards_states_at_zero0(training, p) {
            "0 (DeepSpeed's BF16_Optimizer shards its fp32 states over dp all the same: its own ZeRO-1)"
                .to_string()
        } else {
            p.zero.to_string()
        };
        let _ = writeln!(
            out,
            "  {group} with ZeRO-{zero}: {:.2} GB per GPU per step on {}, {} of the step exposed{}",
            e.comm.dp.wire_bytes.gb(),
            dp_link_words(e, cluster),
            exposed_share_words(share(t.dp_comm_exposed_s.0)),
            {
                let hides = |kind: TermKind| {
                    let term = e.terms.get(kind);
                    term.exposed_s.0 < term.time_s.0
                };
                let takes_time = |kind: TermKind| e.terms.get(kind).time_s.0 > 0.0;
                match (
                    hides(TermKind::DpGradReduce),
                    hides(TermKind::DpParamGather),
                ) {
                    // No time on the wire: nothing to hide, and "nothing hides it" beside 0% read
                    // as a contradiction.
                    _ if !takes_time(TermKind::DpGradReduce)
                        && !takes_time(TermKind::DpParamGather) =>
                    {
                        ""
                    }
                    (true, true) => {
                        " after overlapping with the backward (gradients) and the forward (parameter gathers)"
                    }
                    (true, false) => " after overlapping with the backward",
                    (false, true) => " after overlapping the parameter gathers with the forward",
                    (false, false) => " (nothing hides it)",
                }
            }
        );
    } else {
        let _ = writeln!(out, "  DP 1: a single replica; no gradient traffic");
    }
    let _ = writeln!(
        out,
        "  memory: {} of {} GiB on the most loaded GPU ({}); recompute {}, micro-batch {}",
        gib(e.memory.total_bytes.0),
        gib(e.memory.capacity_bytes.0),
        e.memory.stage.words(),
        recompute_label(p),
        p.micro_batch
    );
    out
}

/// An exposed share of the step, in percent, as the why-lines print it: one decimal, or "under
/// 0.1%" where a share above zero would print as 0.0% (beside "nothing hides it" that read as
/// nothing exposed and nothing hidden at once).
fn exposed_share_words(percent: f64) -> String {
    if percent > 0.0 && percent < 0.05 {
        "under 0.1%".to_string()
    } else {
        format!("{percent:.1}%")
    }
}

/// A percentage strictly between 0 and 100 shown with the decimals that keep it off both ends: a
/// profile whose sustained clock is 0.1% of the reference said "100% slower" (no speed at all),
/// and one a hair under it "0% slower" beside a note that it is slower.
fn percent_off_the_ends(percent: f64) -> String {
    for decimals in 0..4 {
        let shown = format!("{percent:.decimals$}");
        let value: f64 = shown.parse().unwrap_or(percent);
        if value > 0.0 && value < 100.0 {
            return shown;
        }
    }
    format!("{percent:.4}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::Cluster;
    use crate::planner::{SearchOptions, search};
    use crate::specs;
    use crate::training::Training;

    fn top_plans() -> Vec<Estimate> {
        let model = specs::load_model("llama3-70b").unwrap();
        let cluster = Cluster {
            gpu: specs::load_gpu("h100-sxm-80g").unwrap(),
            nodes: 8,
            gpus_per_node: 8,
        };
        let training = Training::megatron_lm_2021(model.seq_len, 512);
        let result = search(
            &model,
            &cluster,
            &training,
            SearchOptions {
                allow_uneven_pp: false,
                allow_cross_node_tp: false,
                ..SearchOptions::default()
            },
        );
        result.feasible().iter().take(3).copied().collect()
    }

    fn width(text: &str) -> usize {
        text.lines().map(|l| l.chars().count()).max().unwrap()
    }

    #[test]
    fn a_narrow_terminal_gets_whole_columns_never_wrapped_numbers() {
        let plans = top_plans();
        let full = plans_table(&plans, false);
        assert!(
            width(&full) > 100,
            "the full table must be wider than the test terminal"
        );
        let narrow = plans_table_fitted(&plans, false, Some(100));
        let (table, note) = narrow.rsplit_once('\n').unwrap();
        assert!(width(table) <= 100, "{narrow}");
        assert!(note.contains("left out to fit 100 columns: DP s"), "{note}");
        // Each shown row is one line and keeps its step time and memory whole.
        for (rank, e) in plans.iter().enumerate() {
            let step = crate::units::show_step_s(e.time.step_s.0);
            let line = table
                .lines()
                .find(|l| l.starts_with(&format!("│ {} ", rank + 1)))
                .unwrap_or_else(|| panic!("row {} is not on one line:\n{table}", rank + 1));
            assert!(line.contains(&step), "{line}");
            assert!(line.contains(&gib(e.memory.total_bytes.0)), "{line}");
        }
        // Wide enough: nothing is left out and no note is added.
        assert_eq!(plans_table_fitted(&plans, false, Some(width(&full))), full);
        assert!(full.contains("DP s") && !full.contains("left out"));
    }

    #[test]
    fn small_throughputs_keep_their_digits() {
        assert_eq!(tflops(0.076e12), "0.076");
        assert_eq!(tflops(989.4e12), "989");
        assert_eq!(tflops(19.5e12), "19.5");
        assert_eq!(tflops_fine(451.24), "451.2");
        assert_eq!(tflops_fine(0.0412), "0.041");
    }
}
