//! Published training runs in no validation file, sixth set (validation/outside_runs_6.md): the
//! measured grid of Hugging Face's "Ultra-Scale Playbook" (nanotron on 1–64 nodes of 8 × H100,
//! Llama-shaped 1B, 3B, 8B and 80B models, sequence 4096, global batch 256 sequences, every
//! DP × TP × PP × micro-batch × ZeRO split they ran). Five grids (1B, 3B and 8B on one node, 80B on
//! 8 and 32 nodes), 122 rows, each run through `tpsim eval` with the plan the row states and the
//! settings it does not state at nanotron's benchmark template's values. Nothing was fitted to
//! them: the bounds record the error measured on 2026-12-07 (`predicted / published − 1`, tokens/s
//! per GPU) with 8 points either side, and each grid's Spearman ρ (tpsim's order of the plans
//! against the measured one) with 0.1 either side. They are not targets.
//!
//! Source: the playbook's interactive benchmark figure,
//! `assets/data/benchmarks/benchmarks_interactive.html` in vinjn/nanotron-ultrascale-playbook at
//! 924e4d0b88e065a9a5198d75b113da1cf3bd4473 (a copy of the Hugging Face Space
//! nanotron/ultrascale-playbook): each point's hover text gives Nodes, MBS, GradAcc, GBS, DP, PP,
//! TP, ZeRO, MFU, tok/s/gpu, tok/s and GPU memory; the subplot titles give the model (1B, 3B, 8B,
//! 80B). The playbook's text (`index.md`, "Benchmarking thousands of configurations"): "1-64 nodes
//! of 8xH100s", "a sequence length of 4,096 and a global batch size of 1M tokens". The rows used
//! are copied in validation/outside_runs_6_playbook_grid.csv.

mod common;

/// Points of error either side of the observed one before the test fails.
const MARGIN: f64 = 0.08;
/// Spearman ρ either side of the recorded one before the ranking test fails.
const RHO_MARGIN: f64 = 0.10;

/// One measured configuration as the figure's hover text gives it: (model, nodes, [DP, TP, PP,
/// MBS, GradAcc, ZeRO], [MFU %, tok/s/gpu, tok/s, GPU memory GB]), then the error tpsim made on
/// 2026-12-07 (predicted / published − 1).
type Row = (&'static str, u32, [u32; 6], [f64; 4], f64);

/// Every row used (the five grids), sorted by model, nodes and measured rate. Two rows of the
/// 1B one-node grid are left out because their own numbers disagree: DP × MBS × GradAcc is 16 and
/// 128, not the GBS 256 the row states (2 × 2 × 4 at 21,650 tok/s/gpu; 1 × 1 × 128 at PP 8, 485).
/// The 80B 8-node grid has one configuration three times (DP 1, TP 8, PP 8, MBS 1, ZeRO-0: 274,
/// 264, 238 tok/s/gpu, three runs of one plan); all three are kept.
const ROWS: &[Row] = &[
    (
        "1B",
        1,
        [8, 1, 1, 2, 16, 0],
        [39.2, 40150.0, 321200.0, 50.2],
        0.169,
    ),
    (
        "1B",
        1,
        [8, 1, 1, 1, 32, 0],
        [38.3, 39273.0, 314187.0, 36.7],
        0.026,
    ),
    (
        "1B",
        1,
        [8, 1, 1, 1, 32, 1],
        [38.1, 39006.0, 312045.0, 24.2],
        0.035,
    ),
    (
        "1B",
        1,
        [4, 1, 2, 4, 16, 1],
        [44.3, 38895.0, 311156.0, 41.8],
        0.055,
    ),
    (
        "1B",
        1,
        [4, 1, 2, 2, 32, 1],
        [43.6, 38299.0, 306393.0, 26.4],
        0.016,
    ),
    (
        "1B",
        1,
        [4, 1, 2, 1, 64, 0],
        [43.3, 37995.0, 303958.0, 26.8],
        -0.094,
    ),
    (
        "1B",
        1,
        [4, 1, 2, 1, 64, 1],
        [43.1, 37802.0, 302418.0, 20.6],
        -0.088,
    ),
    (
        "1B",
        1,
        [4, 2, 1, 8, 8, 0],
        [36.7, 37628.0, 301025.0, 68.3],
        0.284,
    ),
    (
        "1B",
        1,
        [2, 1, 4, 1, 128, 1],
        [42.3, 37097.0, 296780.0, 18.1],
        -0.271,
    ),
    (
        "1B",
        1,
        [2, 1, 4, 2, 64, 1],
        [42.3, 37078.0, 296625.0, 26.2],
        -0.202,
    ),
    (
        "1B",
        1,
        [2, 1, 4, 1, 128, 0],
        [42.1, 36910.0, 295278.0, 20.8],
        -0.268,
    ),
    (
        "1B",
        1,
        [2, 1, 4, 4, 32, 1],
        [41.7, 36566.0, 292525.0, 42.6],
        -0.163,
    ),
    (
        "1B",
        1,
        [2, 2, 2, 8, 16, 1],
        [40.3, 35325.0, 282598.0, 47.8],
        0.104,
    ),
    (
        "1B",
        1,
        [2, 2, 2, 4, 32, 1],
        [40.0, 35063.0, 280501.0, 27.7],
        0.059,
    ),
    (
        "1B",
        1,
        [1, 2, 4, 8, 32, 0],
        [39.3, 34469.0, 275751.0, 49.8],
        -0.147,
    ),
    (
        "1B",
        1,
        [2, 4, 1, 16, 8, 0],
        [32.8, 33597.0, 268776.0, 66.7],
        0.288,
    ),
    (
        "1B",
        1,
        [1, 4, 2, 16, 16, 0],
        [37.4, 32814.0, 262512.0, 56.1],
        0.081,
    ),
    (
        "1B",
        1,
        [1, 4, 2, 8, 32, 0],
        [37.2, 32640.0, 261124.0, 30.4],
        0.040,
    ),
    (
        "1B",
        1,
        [4, 2, 1, 1, 64, 0],
        [28.6, 29274.0, 234190.0, 19.5],
        0.032,
    ),
    (
        "1B",
        1,
        [1, 8, 1, 16, 16, 0],
        [27.4, 28101.0, 224807.0, 38.3],
        0.143,
    ),
    (
        "1B",
        1,
        [4, 2, 1, 1, 64, 1],
        [27.2, 27877.0, 223017.0, 12.5],
        0.085,
    ),
    (
        "1B",
        1,
        [1, 1, 8, 1, 256, 0],
        [31.3, 27437.0, 219494.0, 18.4],
        -0.309,
    ),
    (
        "1B",
        1,
        [2, 2, 2, 2, 64, 1],
        [27.1, 23765.0, 190121.0, 14.4],
        0.391,
    ),
    (
        "1B",
        1,
        [1, 2, 4, 1, 256, 0],
        [26.8, 23540.0, 188316.0, 11.1],
        -0.060,
    ),
    (
        "1B",
        1,
        [2, 2, 2, 1, 128, 0],
        [26.6, 23340.0, 186718.0, 14.7],
        0.151,
    ),
    (
        "1B",
        1,
        [2, 2, 2, 1, 128, 1],
        [23.9, 20952.0, 167615.0, 11.3],
        0.282,
    ),
    (
        "1B",
        1,
        [2, 4, 1, 1, 128, 0],
        [14.0, 14368.0, 114942.0, 10.4],
        0.386,
    ),
    (
        "1B",
        1,
        [2, 4, 1, 1, 128, 1],
        [13.7, 14047.0, 112377.0, 8.2],
        0.418,
    ),
    (
        "1B",
        1,
        [1, 4, 2, 1, 256, 0],
        [13.7, 12013.0, 96104.0, 7.6],
        0.532,
    ),
    (
        "1B",
        1,
        [1, 8, 1, 1, 256, 0],
        [6.7, 6907.0, 55256.0, 5.4],
        0.647,
    ),
    (
        "3B",
        1,
        [4, 1, 2, 2, 32, 1],
        [46.7, 16426.0, 131409.0, 56.9],
        0.136,
    ),
    (
        "3B",
        1,
        [8, 1, 1, 1, 32, 1],
        [42.4, 16341.0, 130724.0, 50.8],
        0.146,
    ),
    (
        "3B",
        1,
        [2, 1, 4, 2, 64, 1],
        [45.7, 16097.0, 128775.0, 52.2],
        -0.033,
    ),
    (
        "3B",
        1,
        [8, 1, 1, 2, 16, 1],
        [41.5, 15997.0, 127975.0, 69.8],
        0.323,
    ),
    (
        "3B",
        1,
        [4, 1, 2, 1, 64, 1],
        [44.2, 15567.0, 124536.0, 41.5],
        0.086,
    ),
    (
        "3B",
        1,
        [4, 1, 2, 1, 64, 0],
        [44.2, 15565.0, 124518.0, 59.7],
        0.085,
    ),
    (
        "3B",
        1,
        [2, 1, 4, 1, 128, 1],
        [43.8, 15402.0, 123216.0, 36.1],
        -0.066,
    ),
    (
        "3B",
        1,
        [2, 1, 4, 1, 128, 0],
        [43.4, 15278.0, 122220.0, 42.4],
        -0.059,
    ),
    (
        "3B",
        1,
        [1, 1, 8, 1, 256, 0],
        [42.2, 14833.0, 118665.0, 32.7],
        -0.026,
    ),
    (
        "3B",
        1,
        [2, 2, 2, 4, 32, 1],
        [41.7, 14666.0, 117328.0, 56.5],
        0.201,
    ),
    (
        "3B",
        1,
        [4, 2, 1, 2, 32, 1],
        [37.7, 14532.0, 116252.0, 39.8],
        0.217,
    ),
    (
        "3B",
        1,
        [1, 4, 2, 8, 32, 0],
        [39.8, 13991.0, 111927.0, 56.8],
        0.130,
    ),
    (
        "3B",
        1,
        [4, 2, 1, 1, 64, 1],
        [36.0, 13875.0, 111003.0, 27.3],
        0.045,
    ),
    (
        "3B",
        1,
        [4, 2, 1, 1, 64, 0],
        [35.9, 13834.0, 110676.0, 45.5],
        0.047,
    ),
    (
        "3B",
        1,
        [2, 2, 2, 2, 64, 1],
        [39.2, 13799.0, 110393.0, 34.0],
        0.162,
    ),
    (
        "3B",
        1,
        [2, 4, 1, 8, 16, 0],
        [34.7, 13367.0, 106935.0, 68.7],
        0.320,
    ),
    (
        "3B",
        1,
        [2, 2, 2, 1, 128, 0],
        [37.8, 13288.0, 106300.0, 32.3],
        0.010,
    ),
    (
        "3B",
        1,
        [1, 2, 4, 1, 256, 0],
        [37.2, 13100.0, 104802.0, 22.2],
        -0.100,
    ),
    (
        "3B",
        1,
        [2, 2, 2, 1, 128, 1],
        [36.6, 12868.0, 102947.0, 25.0],
        0.044,
    ),
    (
        "3B",
        1,
        [1, 8, 1, 16, 16, 0],
        [30.7, 11855.0, 94844.0, 67.1],
        0.185,
    ),
    (
        "3B",
        1,
        [2, 4, 1, 1, 128, 0],
        [22.0, 8488.0, 67903.0, 23.4],
        0.169,
    ),
    (
        "3B",
        1,
        [2, 4, 1, 1, 128, 1],
        [21.2, 8187.0, 65496.0, 17.2],
        0.213,
    ),
    (
        "3B",
        1,
        [1, 4, 2, 1, 256, 0],
        [21.1, 7431.0, 59445.0, 15.9],
        0.268,
    ),
    (
        "3B",
        1,
        [1, 8, 1, 1, 256, 0],
        [10.7, 4144.0, 33150.0, 11.7],
        0.421,
    ),
    (
        "8B",
        1,
        [2, 1, 4, 1, 128, 1],
        [45.2, 7503.0, 60026.0, 63.1],
        0.100,
    ),
    (
        "8B",
        1,
        [4, 2, 1, 1, 64, 1],
        [43.0, 7141.0, 57128.0, 65.2],
        0.170,
    ),
    (
        "8B",
        1,
        [2, 2, 2, 2, 64, 1],
        [42.3, 7016.0, 56129.0, 62.6],
        0.260,
    ),
    (
        "8B",
        1,
        [1, 1, 8, 1, 256, 0],
        [41.0, 6807.0, 54454.0, 62.5],
        0.006,
    ),
    (
        "8B",
        1,
        [2, 2, 2, 1, 128, 0],
        [40.8, 6766.0, 54128.0, 63.6],
        0.167,
    ),
    (
        "8B",
        1,
        [2, 2, 2, 1, 128, 1],
        [40.7, 6753.0, 54026.0, 53.7],
        0.170,
    ),
    (
        "8B",
        1,
        [1, 2, 4, 1, 256, 0],
        [40.3, 6689.0, 53513.0, 40.9],
        0.073,
    ),
    (
        "8B",
        1,
        [2, 4, 1, 1, 128, 0],
        [37.8, 6268.0, 50141.0, 51.4],
        0.008,
    ),
    (
        "8B",
        1,
        [2, 4, 1, 1, 128, 1],
        [37.6, 6238.0, 49905.0, 36.1],
        0.013,
    ),
    (
        "8B",
        1,
        [1, 8, 1, 8, 32, 0],
        [35.6, 5909.0, 47270.0, 60.1],
        0.249,
    ),
    (
        "8B",
        1,
        [1, 4, 2, 1, 256, 0],
        [35.5, 5883.0, 47067.0, 30.8],
        0.030,
    ),
    (
        "8B",
        1,
        [1, 8, 1, 1, 256, 0],
        [21.8, 3616.0, 28929.0, 24.4],
        0.150,
    ),
    (
        "8B",
        1,
        [4, 1, 2, 1, 64, 1],
        [16.6, 2752.0, 22016.0, 71.5],
        2.356,
    ),
    (
        "80B",
        8,
        [1, 4, 16, 1, 256, 0],
        [30.6, 665.0, 42559.0, 63.1],
        0.285,
    ),
    (
        "80B",
        8,
        [4, 16, 1, 1, 64, 1],
        [16.0, 308.0, 19724.0, 64.5],
        0.723,
    ),
    (
        "80B",
        8,
        [4, 8, 2, 1, 64, 1],
        [15.4, 298.0, 19061.0, 65.6],
        1.685,
    ),
    (
        "80B",
        8,
        [1, 8, 8, 1, 256, 0],
        [12.6, 274.0, 17565.0, 41.7],
        1.780,
    ),
    (
        "80B",
        8,
        [1, 8, 8, 1, 256, 0],
        [13.7, 264.0, 16884.0, 46.8],
        1.885,
    ),
    (
        "80B",
        8,
        [2, 8, 4, 1, 128, 0],
        [11.8, 256.0, 16355.0, 62.9],
        2.072,
    ),
    (
        "80B",
        8,
        [2, 8, 4, 1, 128, 1],
        [12.7, 246.0, 15751.0, 61.8],
        2.207,
    ),
    (
        "80B",
        8,
        [1, 8, 8, 1, 256, 0],
        [12.1, 238.0, 15200.0, 45.4],
        2.201,
    ),
    (
        "80B",
        8,
        [2, 16, 2, 4, 32, 1],
        [9.8, 189.0, 12109.0, 64.0],
        2.912,
    ),
    (
        "80B",
        8,
        [2, 8, 4, 2, 64, 1],
        [8.7, 169.0, 10799.0, 64.2],
        4.194,
    ),
    (
        "80B",
        8,
        [4, 16, 1, 2, 32, 1],
        [7.0, 135.0, 8611.0, 64.2],
        3.940,
    ),
    (
        "80B",
        8,
        [2, 16, 2, 2, 64, 1],
        [6.9, 133.0, 8538.0, 48.9],
        3.929,
    ),
    (
        "80B",
        8,
        [2, 32, 1, 1, 128, 1],
        [5.4, 104.0, 6640.0, 40.5],
        1.594,
    ),
    (
        "80B",
        8,
        [2, 32, 1, 1, 128, 0],
        [5.4, 104.0, 6624.0, 56.2],
        1.593,
    ),
    (
        "80B",
        8,
        [2, 4, 8, 1, 128, 1],
        [5.1, 98.0, 6280.0, 74.3],
        8.417,
    ),
    (
        "80B",
        8,
        [2, 32, 1, 4, 32, 1],
        [3.6, 69.0, 4415.0, 46.8],
        5.823,
    ),
    (
        "80B",
        8,
        [2, 16, 2, 1, 128, 1],
        [3.3, 64.0, 4070.0, 43.4],
        7.234,
    ),
    (
        "80B",
        8,
        [1, 16, 4, 1, 256, 0],
        [3.2, 61.0, 3903.0, 35.0],
        7.501,
    ),
    (
        "80B",
        8,
        [2, 16, 2, 1, 128, 0],
        [2.8, 54.0, 3425.0, 60.0],
        8.739,
    ),
    (
        "80B",
        32,
        [4, 4, 16, 1, 64, 1],
        [30.7, 594.0, 151995.0, 64.2],
        0.245,
    ),
    (
        "80B",
        32,
        [2, 4, 32, 1, 128, 1],
        [30.6, 591.0, 151268.0, 56.9],
        0.253,
    ),
    (
        "80B",
        32,
        [2, 4, 32, 1, 128, 0],
        [26.7, 578.0, 148052.0, 53.2],
        0.281,
    ),
    (
        "80B",
        32,
        [8, 4, 8, 1, 32, 1],
        [28.3, 545.0, 139645.0, 62.8],
        0.458,
    ),
    (
        "80B",
        32,
        [4, 4, 16, 1, 64, 0],
        [24.4, 530.0, 135601.0, 65.4],
        0.387,
    ),
    (
        "80B",
        32,
        [16, 16, 1, 2, 8, 1],
        [21.5, 414.0, 106099.0, 55.3],
        0.548,
    ),
    (
        "80B",
        32,
        [16, 16, 1, 1, 16, 1],
        [14.7, 284.0, 72712.0, 64.1],
        0.790,
    ),
    (
        "80B",
        32,
        [16, 8, 2, 2, 8, 1],
        [14.5, 280.0, 71744.0, 64.3],
        1.797,
    ),
    (
        "80B",
        32,
        [8, 8, 4, 1, 32, 1],
        [13.9, 268.0, 68654.0, 48.6],
        1.670,
    ),
    (
        "80B",
        32,
        [4, 8, 8, 1, 64, 1],
        [13.3, 257.0, 65859.0, 37.3],
        1.715,
    ),
    (
        "80B",
        32,
        [2, 8, 16, 1, 128, 1],
        [12.2, 236.0, 60396.0, 35.4],
        1.789,
    ),
    (
        "80B",
        32,
        [16, 8, 2, 1, 16, 1],
        [12.0, 232.0, 59315.0, 52.7],
        2.089,
    ),
    (
        "80B",
        32,
        [8, 8, 4, 1, 32, 0],
        [10.3, 223.0, 57167.0, 62.7],
        2.142,
    ),
    (
        "80B",
        32,
        [4, 8, 8, 1, 64, 0],
        [9.9, 214.0, 54851.0, 43.5],
        2.231,
    ),
    (
        "80B",
        32,
        [1, 8, 32, 1, 256, 0],
        [9.4, 205.0, 52439.0, 27.4],
        2.104,
    ),
    (
        "80B",
        32,
        [2, 8, 16, 1, 128, 0],
        [9.0, 195.0, 50022.0, 33.4],
        2.364,
    ),
    (
        "80B",
        32,
        [8, 16, 2, 4, 8, 1],
        [9.1, 176.0, 44954.0, 58.4],
        2.791,
    ),
    (
        "80B",
        32,
        [8, 8, 4, 2, 16, 1],
        [8.0, 155.0, 39598.0, 60.6],
        3.889,
    ),
    (
        "80B",
        32,
        [4, 16, 4, 4, 16, 1],
        [5.7, 110.0, 28244.0, 47.8],
        4.728,
    ),
    (
        "80B",
        32,
        [4, 32, 2, 8, 8, 1],
        [5.4, 104.0, 26609.0, 47.2],
        3.555,
    ),
    (
        "80B",
        32,
        [8, 16, 2, 2, 16, 1],
        [4.7, 91.0, 23380.0, 42.6],
        5.773,
    ),
    (
        "80B",
        32,
        [4, 8, 8, 2, 32, 1],
        [4.4, 85.0, 21652.0, 51.2],
        7.555,
    ),
    (
        "80B",
        32,
        [2, 32, 4, 8, 16, 1],
        [3.9, 74.0, 19062.0, 42.2],
        5.019,
    ),
    (
        "80B",
        32,
        [2, 16, 8, 4, 32, 1],
        [3.6, 69.0, 17789.0, 44.3],
        7.686,
    ),
    (
        "80B",
        32,
        [8, 16, 2, 1, 32, 1],
        [3.4, 66.0, 16996.0, 36.8],
        6.643,
    ),
    (
        "80B",
        32,
        [4, 16, 4, 1, 64, 1],
        [3.4, 66.0, 16819.0, 25.0],
        6.529,
    ),
    (
        "80B",
        32,
        [2, 16, 8, 1, 128, 1],
        [3.1, 60.0, 15434.0, 22.0],
        7.056,
    ),
    (
        "80B",
        32,
        [4, 32, 2, 4, 16, 1],
        [3.1, 59.0, 15086.0, 30.4],
        6.445,
    ),
    (
        "80B",
        32,
        [4, 16, 4, 2, 32, 1],
        [3.0, 58.0, 14825.0, 31.7],
        9.289,
    ),
    (
        "80B",
        32,
        [2, 8, 16, 2, 64, 1],
        [2.3, 45.0, 11456.0, 50.2],
        14.074,
    ),
    (
        "80B",
        32,
        [2, 32, 4, 4, 32, 1],
        [2.1, 40.0, 10353.0, 25.4],
        9.576,
    ),
    (
        "80B",
        32,
        [2, 16, 8, 2, 64, 1],
        [1.9, 37.0, 9457.0, 26.4],
        14.517,
    ),
    (
        "80B",
        32,
        [4, 32, 2, 2, 32, 1],
        [1.5, 29.0, 7465.0, 21.8],
        11.509,
    ),
    (
        "80B",
        32,
        [2, 32, 4, 2, 64, 1],
        [1.1, 21.0, 5384.0, 17.1],
        15.866,
    ),
    (
        "80B",
        32,
        [4, 32, 2, 1, 64, 1],
        [0.7, 14.0, 3487.0, 19.0],
        17.844,
    ),
    (
        "80B",
        32,
        [2, 32, 4, 1, 128, 1],
        [0.6, 11.0, 2737.0, 13.8],
        22.589,
    ),
];

/// The playbook's global batch: 1M tokens = 256 sequences of 4096.
const GBS: u32 = 256;
const SEQ: f64 = 4096.0;
/// H100 SXM dense bf16 peak (NVIDIA H100 datasheet), the denominator of the figure's MFU.
const H100_BF16_PEAK: f64 = 989e12;

/// The model shapes (Llama 3.2 1B / 3B, Llama 3.1 8B / 70B widths) with as many key/value heads as
/// query heads: bench_cluster's `create_configs.py` sets "num_attention_heads =
/// num_key_value_heads for all models <=> using MHA", and the figure's MFU over its tok/s/gpu
/// gives the FLOPs of these shapes with MHA, not with GQA (asserted below). 1B and 3B tie the
/// output layer to the embedding (Llama 3.2 does), so they come from the Hugging Face configs in
/// tests/data/; 8B and 80B do not.
fn shape(model: &str) -> &'static str {
    match model {
        "1B" => "--hf-config tests/data/outside6-llama-1b-mha.json",
        "3B" => "--hf-config tests/data/outside6-llama-3b-mha.json",
        "8B" => {
            "--layers 32 --hidden 4096 --heads 32 --ffn-hidden 14336 --gated-mlp --style llama \
             --vocab 128256"
        }
        "80B" => {
            "--layers 80 --hidden 8192 --heads 64 --ffn-hidden 28672 --gated-mlp --style llama \
             --vocab 128256"
        }
        other => panic!("no shape for {other}"),
    }
}

/// (layers, hidden, heads, FFN width, output layer counted twice by the figure's MFU).
fn dims(model: &str) -> (f64, f64, f64, f64) {
    match model {
        "1B" => (16.0, 2048.0, 32.0, 8192.0),
        "3B" => (28.0, 3072.0, 24.0, 8192.0),
        "8B" => (32.0, 4096.0, 32.0, 14336.0),
        "80B" => (80.0, 8192.0, 64.0, 28672.0),
        other => panic!("no shape for {other}"),
    }
}
const VOCAB: f64 = 128256.0;

/// The row's plan in tpsim's flags. Stated by the row: nodes, TP, PP, micro-batch, ZeRO stage,
/// global batch (DP and GradAcc follow). Not stated, at bench_cluster's nanotron template
/// (`bench_cluster/template/base_config.py` at f55b5e5): `tp_mode: REDUCE_SCATTER` (sequence
/// parallelism, `--sequence-parallel` at TP > 1), `tp_linear_async_communication: False` (no TP
/// overlap), `recompute_layer: False`, `pp_engine: 1f1b`, `ddp_bucket_cap_mb: 25` (bucketed
/// gradient reduction under the backward, tpsim's default), `accumulate_grad_in_fp32: True` (fp32
/// gradients, tpsim's default); nanotron's ZeRO-1 gathers the updated shards after the optimizer
/// step, not under the next forward (`--overlap-param-gather false`). TP 16 and 32 span nodes
/// (`--allow-cross-node-tp`); 28 layers over PP 8 are uneven (`--allow-uneven-pp`).
fn plan_args(r: &Row) -> Vec<String> {
    let &(model, nodes, [_, tp, pp, mbs, _, zero], ..) = r;
    let (layers, ..) = dims(model);
    let mut s = format!(
        "eval {} --seq-len 4096 --gpu h100-sxm-80g --nodes {nodes} --tp {tp} --pp {pp} \
         --global-batch {GBS} --micro-batch {mbs} --zero {zero} --tp-comm-overlap false \
         --overlap-param-gather false",
        shape(model)
    );
    if tp > 1 {
        s.push_str(" --sequence-parallel");
    }
    if tp > 8 {
        s.push_str(" --allow-cross-node-tp");
    }
    if !(layers as u32).is_multiple_of(pp) {
        s.push_str(" --allow-uneven-pp");
    }
    s.split_whitespace().map(str::to_string).collect()
}

fn eval_json(a: &[String]) -> serde_json::Value {
    let a: Vec<&str> = a
        .iter()
        .map(String::as_str)
        .chain(["--format", "json"])
        .collect();
    common::json(&a)
}

/// Tokens/s per GPU that `eval` prints for one plan, and whether it fits.
fn predict(r: &Row) -> (f64, bool) {
    let out = eval_json(&plan_args(r));
    let plan = &out["plans"][0];
    let gpus = plan["tp"].as_f64().unwrap()
        * plan["pp"].as_f64().unwrap()
        * plan["dp"].as_f64().unwrap()
        * plan["cp"].as_f64().unwrap();
    (
        plan["tokens_per_s"].as_f64().unwrap() / gpus,
        plan["infeasible"].is_null(),
    )
}

/// The five grids: (model, nodes, Spearman ρ of tpsim's rates against the measured ones on
/// 2026-12-07, measured rate of tpsim's favourite over the measured best).
const GRIDS: [(&str, u32, f64, f64); 5] = [
    ("1B", 1, 0.778, 0.937),
    ("3B", 1, 0.789, 0.974),
    ("8B", 1, 0.440, 0.367),
    ("80B", 8, 0.564, 0.147),
    ("80B", 32, 0.802, 0.918),
];

#[test]
fn outside_runs_6_stay_within_their_measured_error() {
    let mut failures = Vec::new();
    for r in ROWS {
        let (predicted, fits) = predict(r);
        // Every row is a run that completed: tpsim must find it fits.
        assert!(fits, "{r:?}: tpsim finds a measured plan does not fit");
        let published = r.3[1];
        let error = predicted / published - 1.0;
        let observed = r.4;
        eprintln!(
            "{:>3} {:>2}n dp{:>2} tp{:>2} pp{:>2} mbs{:>2} z{} published {:>8.1} predicted {:>8.1} {:+7.1}% (recorded {:+.1}%)",
            r.0,
            r.1,
            r.2[0],
            r.2[1],
            r.2[2],
            r.2[3],
            r.2[5],
            published,
            predicted,
            100.0 * error,
            100.0 * observed
        );
        if (error - observed).abs() > MARGIN {
            failures.push(format!(
                "{r:?}: {:+.1}% vs recorded {:+.1}%",
                100.0 * error,
                100.0 * observed
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// Does tpsim order the plans of one grid as the measurements do? Spearman ρ per grid within 0.1
/// of the recorded value, and the measured rate of tpsim's favourite plan (its fastest) over the
/// measured best, within 0.05 of the recorded ratio.
#[test]
fn outside_runs_6_rank_the_grids_as_recorded() {
    for &(model, nodes, rho_recorded, fav_recorded) in &GRIDS {
        let grid: Vec<&Row> = ROWS
            .iter()
            .filter(|r| r.0 == model && r.1 == nodes)
            .collect();
        assert!(grid.len() >= 13, "{model} {nodes}: {} rows", grid.len());
        let predicted: Vec<f64> = grid.iter().map(|r| predict(r).0).collect();
        let measured: Vec<f64> = grid.iter().map(|r| r.3[1]).collect();
        let rho = common::spearman(&predicted, &measured);
        let best = measured.iter().cloned().fold(f64::MIN, f64::max);
        let fav = (0..grid.len())
            .max_by(|&a, &b| predicted[a].total_cmp(&predicted[b]))
            .unwrap();
        let fav_ratio = measured[fav] / best;
        eprintln!(
            "{model} on {nodes} nodes: rho {rho:.3}, favourite at {fav_ratio:.3} of the best"
        );
        assert!(
            (rho - rho_recorded).abs() <= RHO_MARGIN,
            "{model} {nodes}: rho {rho:.3} vs recorded {rho_recorded}"
        );
        assert!(
            (fav_ratio - fav_recorded).abs() <= 0.05,
            "{model} {nodes}: favourite at {fav_ratio:.3} vs recorded {fav_recorded}"
        );
    }
}

/// The transcribed numbers against each other: GBS = DP × MBS × GradAcc = 256; GPUs = DP × TP ×
/// PP = 8 × nodes; tok/s = tok/s/gpu × GPUs to the figure's rounding of tok/s/gpu.
#[test]
fn playbook_rows_agree_with_themselves() {
    for r in ROWS {
        let &(_, nodes, [dp, tp, pp, mbs, ga, _], [_, per_gpu, total, mem], _) = r;
        assert_eq!(dp * mbs * ga, GBS, "{r:?}");
        assert_eq!(dp * tp * pp, 8 * nodes, "{r:?}");
        let gpus = f64::from(8 * nodes);
        assert!(
            (total - per_gpu * gpus).abs() <= 0.5 * gpus + 1.0,
            "{r:?}: {total} vs {}",
            per_gpu * gpus
        );
        assert!(mem > 0.0 && mem < 80.0, "{r:?}");
    }
}

/// nanotron's `get_flops` for Llama (model FLOPs = 3 × forward: QKV with `num_key_value_heads`,
/// QKᵀ and AV at the full s², the output projection, a gated MLP as 4·h·ffn + 2·ffn·h, and the
/// output layer 2·h·V), per token.
fn nanotron_flops_per_token(model: &str, kv_heads_equal_heads: bool) -> f64 {
    let (l, h, heads, ffn) = dims(model);
    let head = h / heads;
    let kv = if kv_heads_equal_heads { heads } else { 8.0 };
    let qkv = 2.0 * l * h * (heads * head + 2.0 * kv * head);
    let scores = 2.0 * 2.0 * l * heads * head * SEQ;
    let out = 2.0 * l * heads * head * h;
    let mlp = 4.0 * l * h * ffn + 2.0 * l * ffn * h;
    let lm = 2.0 * h * VOCAB;
    3.0 * (qkv + scores + out + mlp + lm)
}

/// The figure's MFU over its tok/s/gpu is the FLOPs per token its authors counted. For the 1B and
/// 3B at PP 1 it is nanotron's count of the MHA shapes (within 2%), not of Llama 3.2's GQA ones
/// (8 KV heads: 6% and 8% fewer): the grid ran MHA. For 8B and 80B, and for 1B and 3B under a
/// pipeline, it is the MHA count plus one more output-layer-sized matmul (3 · 2·h·V) — the untied
/// (or, split over stages, duplicated) embedding counted as a matmul; with GQA it would be 9–12%
/// fewer. Rows at MFU under 20% are left out (0.1-point rounding is over 0.5% there). Three 80B
/// rows (ZeRO-0, TP 4, PP 16 or 32: 665, 578 and 530 tok/s/gpu) state an MFU 11% under their
/// rate's count (0.889–0.893 of it): the figure's two numbers disagree there, and tpsim is judged
/// on tok/s/gpu.
#[test]
fn playbook_mfu_counts_the_mha_shapes() {
    let mut disagree = Vec::new();
    let mut checked = 0;
    for r in ROWS {
        let &(model, _, [_, _, pp, ..], [mfu, per_gpu, ..], _) = r;
        if mfu < 20.0 {
            continue;
        }
        let counted = mfu / 100.0 * H100_BF16_PEAK / per_gpu;
        let (_, h, ..) = dims(model);
        let extra = if model == "8B" || model == "80B" || pp > 1 {
            3.0 * 2.0 * h * VOCAB
        } else {
            0.0
        };
        let mha = nanotron_flops_per_token(model, true) + extra;
        let gqa = nanotron_flops_per_token(model, false) + extra;
        checked += 1;
        if (counted / mha - 1.0).abs() < 0.02 {
            assert!(
                counted / gqa - 1.0 > 0.05,
                "{r:?}: {counted:.4e} vs GQA {gqa:.4e}"
            );
        } else {
            disagree.push((r, counted / mha));
        }
    }
    assert!(checked >= 60, "{checked} rows at MFU >= 20%");
    assert_eq!(disagree.len(), 3, "{disagree:#?}");
    for (r, ratio) in disagree {
        assert!(r.0 == "80B" && r.2[5] == 0 && r.2[1] == 4, "{r:?}");
        assert!((0.88..0.90).contains(&ratio), "{r:?}: {ratio}");
    }
}

/// Split one CSV line, keeping commas inside quotes ("40,150").
fn csv_fields(line: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut quoted = false;
    for c in line.chars() {
        match c {
            '"' => quoted = !quoted,
            ',' if !quoted => out.push(String::new()),
            _ => out.last_mut().unwrap().push(c),
        }
    }
    out
}

/// The rows above are the copy in validation/outside_runs_6_playbook_grid.csv (the figure's hover
/// text, verbatim), line for line: same plan, same MFU, tok/s/gpu, tok/s and GPU memory.
#[test]
fn rows_are_the_validation_copy() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/validation/outside_runs_6_playbook_grid.csv"
    );
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = text.lines();
    assert_eq!(
        lines.next().unwrap(),
        "model,nodes,mbs,grad_acc,gbs,dp,pp,tp,zero,mfu,tok_s_gpu,tok_s,gpu_memory"
    );
    let lines: Vec<&str> = lines.collect();
    assert_eq!(lines.len(), ROWS.len());
    let num = |s: &str| -> f64 {
        s.trim_end_matches('%')
            .trim_end_matches(" GB")
            .replace(',', "")
            .parse()
            .unwrap()
    };
    for (line, r) in lines.iter().zip(ROWS) {
        let f = csv_fields(line);
        let &(model, nodes, [dp, tp, pp, mbs, ga, zero], [mfu, per_gpu, total, mem], _) = r;
        assert_eq!(f[0], model, "{line}");
        let ints: Vec<u32> = [1, 2, 3, 4, 5, 6, 7, 8]
            .iter()
            .map(|&i| f[i].parse().unwrap())
            .collect();
        assert_eq!(ints, [nodes, mbs, ga, GBS, dp, pp, tp, zero], "{line}");
        assert_eq!(
            [num(&f[9]), num(&f[10]), num(&f[11]), num(&f[12])],
            [mfu, per_gpu, total, mem],
            "{line}"
        );
    }
}
