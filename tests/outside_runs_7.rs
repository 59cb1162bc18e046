//! Published training runs in no validation file, seventh set (validation/outside_runs_7.md):
//! NVIDIA's MLPerf Training submissions, v3.0 to v5.0 — GPT-3 175B on 256 to 11,616 H100 and on 64
//! B200, Llama 3.1 405B at 8,192 tokens on 512 to 8,192 H100 and on 256 and 512 GB200 — each with
//! the plan its `config_*.sh` states (TP, PP, CP, interleaving, micro-batch), the global batch and
//! gradient-accumulation steps its result log states, and the step time its result logs measured.
//! Every row is in validation/outside_runs_7_mlperf.csv with its repository, commit and paths.
//!
//! Nothing was fitted to them: the bounds record the error measured on 2026-12-07 at ac6608f
//! (`predicted / published − 1`, tokens/s per GPU) with 3 points either side, the median |error|
//! with 1 point above it, and each model's Spearman ρ (tpsim's order of the plans against the
//! measured one) with 0.1 below it. They are not targets: a change to the cost model that moves
//! a row more than 3 points, in either direction, must be looked at and re-recorded.

mod common;

/// Points of error either side of the recorded one before a row fails.
const MARGIN: f64 = 0.03;
/// Points above the recorded median |error| before the set fails.
const MEDIAN_MARGIN: f64 = 0.01;
/// Spearman ρ below the recorded one before the ranking test fails.
const RHO_MARGIN: f64 = 0.10;

/// tpsim's error on each row on 2026-12-07 at ac6608f (predicted / published − 1, tokens/s per
/// GPU), in the order of the CSV.
const RECORDED: &[(&str, f64)] = &[
    ("mlperf-v3.0-dgxh100_n64_nemo", 0.059),
    ("mlperf-v3.0-dgxh100_n96_nemo", 0.063),
    ("mlperf-v3.1-eos_n64_ngc23.09_nemo", -0.031),
    ("mlperf-v3.1-eos_n96_ngc23.09_nemo", -0.029),
    ("mlperf-v3.1-eos-dfw_n512_ngc23.09_nemo", 0.021),
    ("mlperf-v3.1-eos-dfw_n768_ngc23.09_nemo", 0.024),
    ("mlperf-v3.1-eos-dfw_n1024_ngc23.09_nemo", 0.025),
    ("mlperf-v3.1-eos-dfw_n1280_ngc23.09_nemo", 0.053),
    ("mlperf-v3.1-eos-dfw_n1344_ngc23.09_nemo", 0.057),
    ("mlperf-v4.0-eos_n64_ngc24.04_nemo", -0.028),
    ("mlperf-v4.0-eos-dfw_n1344_ngc24.04_nemo", -0.008),
    ("mlperf-v4.0-eos-dfw_n1452_ngc24.04_nemo", -0.008),
    ("mlperf-v4.1-eos_n32_ngc24.09_nemo", -0.071),
    ("mlperf-v4.1-eos_n64_ngc24.09_nemo", -0.051),
    ("mlperf-v4.1-b200_n8_preview_nemo", -0.111),
    ("mlperf-v5.0-eos-dfw_n64_ngc25.01_nemo", 0.009),
    ("mlperf-v5.0-eos-dfw_n256_ngc25.01_nemo", 0.005),
    ("mlperf-v5.0-eos-dfw_n304_ngc25.01_nemo", 0.006),
    ("mlperf-v5.0-eos-dfw_n320_ngc25.01_nemo", 0.002),
    ("mlperf-v5.0-eos-dfw_n1024_ngc25.01_nemo", 0.002),
    ("mlperf-v5.0-tyche_ngpu256_ngc25.04_nemo", 0.071),
    ("mlperf-v5.0-tyche_ngpu512_ngc25.04_nemo", 0.089),
];

/// Median |error| of the 22 rows on 2026-12-07.
const RECORDED_MEDIAN_ABS_ERROR: f64 = 0.028;

/// Spearman ρ of tpsim's tokens/s per GPU against the measured one, per group of runs of one
/// model on one GPU, on 2026-12-07: (group, ρ).
const RECORDED_RHO: &[(&str, f64)] = &[("gpt3-175b/h100", 0.954), ("llama3-405b/h100", 1.0)];

const HEADER: &str = "id,mlperf_version,repo,commit,results,config,model,gpu,nodes,gpus_per_node,\
gpus,tp,pp,cp,dp,vpp,mbs,gbs,seq,ga,grad_dtype,measured_from,samples,runs,step_s,\
tokens_per_s_per_gpu";

/// One row of validation/outside_runs_7_mlperf.csv.
struct Row {
    id: String,
    commit: String,
    model: String,
    gpu: String,
    nodes: u32,
    gpus_per_node: u32,
    gpus: u32,
    tp: u32,
    pp: u32,
    cp: u32,
    dp: u32,
    vpp: u32,
    mbs: u32,
    gbs: u32,
    seq: u32,
    ga: u32,
    grad_dtype: String,
    measured_from: String,
    step_s: f64,
    tokens_per_s_per_gpu: f64,
}

fn rows() -> Vec<Row> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/validation/outside_runs_7_mlperf.csv"
    );
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next().unwrap(), HEADER);
    lines
        .map(|line| {
            let f: Vec<&str> = line.split(',').collect();
            assert_eq!(f.len(), 26, "{line}");
            let n = |i: usize| -> u32 { f[i].parse().unwrap_or_else(|_| panic!("{line}: {i}")) };
            let x = |i: usize| -> f64 { f[i].parse().unwrap_or_else(|_| panic!("{line}: {i}")) };
            Row {
                id: f[0].to_string(),
                commit: f[3].to_string(),
                model: f[6].to_string(),
                gpu: f[7].to_string(),
                nodes: n(8),
                gpus_per_node: n(9),
                gpus: n(10),
                tp: n(11),
                pp: n(12),
                cp: n(13),
                dp: n(14),
                vpp: n(15),
                mbs: n(16),
                gbs: n(17),
                seq: n(18),
                ga: n(19),
                grad_dtype: f[20].to_string(),
                measured_from: f[21].to_string(),
                step_s: x(24),
                tokens_per_s_per_gpu: x(25),
            }
        })
        .collect()
}

/// The plan as the submission's config states it. Every row: sequence parallel (NeMo's
/// `sequence_parallel: True` default in the submissions' conf/custom.yaml), no recompute
/// (`ACT_CKPT_*` null), the distributed optimizer (`USE_DIST_OPTIMIZER=True`: ZeRO-1), FP8 with
/// delayed scaling (`FP8=True`, amax history: config_fp8.sh / custom.yaml `fp8_recipe: delayed`),
/// TP comm overlap on (`TP_COMM_OVERLAP=True`, tpsim's megatron-core default). GPT-3 rows reduce
/// gradients in bf16 (conf/optim/distributed_fused_adam.yaml `grad_sync_dtype: bf16`); the 405B
/// rows state no gradient dtype and keep tpsim's default. Llama 3.1 405B's 126 layers over PP 8 ×
/// VP 8 are split with the embedding and the loss counted as one layer each (`ASYM_PP_EMBED`,
/// `ASYM_PP_LOSS`), which is tpsim's uneven split.
fn plan_args(r: &Row) -> Vec<String> {
    let mut s = format!(
        "eval --model {} --seq-len {} --gpu {} --nodes {} --tp {} --pp {} --cp {} --vpp {} \
         --global-batch {} --micro-batch {} --sequence-parallel --recompute none --zero 1 \
         --precision fp8 --fp8-scaling delayed",
        r.model, r.seq, r.gpu, r.nodes, r.tp, r.pp, r.cp, r.vpp, r.gbs, r.mbs
    );
    if r.grad_dtype != "default" {
        s.push_str(&format!(" --grad-dtype {}", r.grad_dtype));
    }
    if r.model == "llama3-405b" {
        s.push_str(" --allow-uneven-pp");
    }
    s.split_whitespace().map(str::to_string).collect()
}

/// Tokens/s per GPU that `eval` prints for the row's plan, and whether it fits.
fn predict(r: &Row) -> (f64, bool) {
    let args = plan_args(r);
    let a: Vec<&str> = args
        .iter()
        .map(String::as_str)
        .chain(["--format", "json"])
        .collect();
    let out = common::json(&a);
    let plan = &out["plans"][0];
    let gpus: f64 = ["tp", "pp", "dp", "cp"]
        .iter()
        .map(|k| plan[*k].as_f64().unwrap())
        .product();
    assert_eq!(
        gpus,
        f64::from(r.gpus),
        "{}: tpsim's plan has other GPUs",
        r.id
    );
    (
        plan["tokens_per_s"].as_f64().unwrap() / gpus,
        plan["infeasible"].is_null(),
    )
}

#[test]
fn outside_runs_7_stay_within_their_recorded_error() {
    let rows = rows();
    assert_eq!(rows.len(), RECORDED.len());
    let mut failures = Vec::new();
    let mut abs_errors = Vec::new();
    let mut groups: std::collections::BTreeMap<String, (Vec<f64>, Vec<f64>)> = Default::default();
    for (r, &(id, recorded)) in rows.iter().zip(RECORDED) {
        assert_eq!(r.id, id, "RECORDED is in the CSV's order");
        let (predicted, fits) = predict(r);
        // Every row is a submitted run that trained: tpsim must find it fits.
        assert!(fits, "{}: tpsim finds a measured plan does not fit", r.id);
        let (error, failure) =
            common::against_recorded(&r.id, r.tokens_per_s_per_gpu, predicted, recorded, MARGIN);
        failures.extend(failure);
        abs_errors.push(error.abs());
        let gpu_family = r.gpu.split('-').next().unwrap();
        let g = groups
            .entry(format!("{}/{gpu_family}", r.model))
            .or_default();
        g.0.push(r.tokens_per_s_per_gpu);
        g.1.push(predicted);
    }
    assert!(failures.is_empty(), "{failures:#?}");
    let median_abs = common::median(abs_errors);
    eprintln!("median |error| {:.1}%", 100.0 * median_abs);
    assert!(
        median_abs <= RECORDED_MEDIAN_ABS_ERROR + MEDIAN_MARGIN,
        "median |error| {:.1}% grew past the recorded {:.1}% + {:.0} point",
        100.0 * median_abs,
        100.0 * RECORDED_MEDIAN_ABS_ERROR,
        100.0 * MEDIAN_MARGIN
    );
    for &(group, recorded) in RECORDED_RHO {
        let (measured, predicted) = &groups[group];
        let rho = common::spearman(measured, predicted);
        eprintln!("{group}: {} runs, Spearman ρ {rho:.3}", measured.len());
        assert!(
            rho >= recorded - RHO_MARGIN,
            "{group}: Spearman ρ {rho:.3} fell below the recorded {recorded:.3} − {RHO_MARGIN}"
        );
    }
}

/// The transcribed numbers against each other: GPUs = nodes × GPUs per node = TP × PP × CP × DP;
/// the logged global batch = DP × micro-batch × the logged gradient-accumulation steps; the
/// tokens/s per GPU = global batch × sequence / (step × GPUs), to the CSV's rounding; and the
/// sources' commits are the snapshots read.
#[test]
fn mlperf_rows_agree_with_themselves() {
    let commits = [
        ("mlperf-v3.0-", "63e326c400f5d8bb8c6070a9ab08332d4931152e"),
        ("mlperf-v3.1-", "d06288b2bd675a9d88e0e6181f5bb5626b71ec19"),
        ("mlperf-v4.0-", "6fe954378efe4a1a1bd665550b18ff8f26018def"),
        ("mlperf-v4.1-", "b87b9e396f771345d4ef122ba33456304f15228d"),
        ("mlperf-v5.0-", "0fdc28f013256aea84fa36fdaf1e0fa46094b18c"),
    ];
    for r in rows() {
        assert_eq!(r.gpus, r.nodes * r.gpus_per_node, "{}", r.id);
        assert_eq!(r.gpus, r.tp * r.pp * r.cp * r.dp, "{}", r.id);
        assert_eq!(r.gbs, r.dp * r.mbs * r.ga, "{}", r.id);
        let per_gpu = f64::from(r.gbs) * f64::from(r.seq) / (r.step_s * f64::from(r.gpus));
        assert!(
            (per_gpu / r.tokens_per_s_per_gpu - 1.0).abs() < 1e-4,
            "{}: {per_gpu} vs {}",
            r.id,
            r.tokens_per_s_per_gpu
        );
        assert!(
            ["step", "block"].contains(&r.measured_from.as_str()),
            "{}",
            r.id
        );
        let (_, commit) = commits
            .iter()
            .find(|(prefix, _)| r.id.starts_with(prefix))
            .unwrap();
        assert_eq!(&r.commit, commit, "{}", r.id);
    }
}
