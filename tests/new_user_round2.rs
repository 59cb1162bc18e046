//! Regressions from the second review of valid usage by a new user who bets cluster time on the
//! answer: where one command contradicted another, or the README its own output (each test names
//! the finding it guards).

mod common;
use common::{json, run};

const LLAMA70_ROW1: [&str; 21] = [
    "eval",
    "--model",
    "llama3-70b",
    "--nodes",
    "16",
    "--global-batch",
    "512",
    "--tp",
    "8",
    "--pp",
    "2",
    "--vpp",
    "20",
    "--micro-batch",
    "2",
    "--sequence-parallel",
    "--recompute",
    "none",
    "--zero",
    "1",
    "--tp-comm-overlap",
];

/// With `--tp-comm-overlap false` (or a Megatron-LM launch line without it) the TP line said its
/// hidden part was hidden "by the neighbouring GEMMs (TP comm overlap)", the overlap the header
/// says is off; what hides it is the backward's asynchronous re-gather under the dgrad GEMMs.
#[test]
fn tp_time_hidden_without_tp_overlap_is_not_credited_to_tp_overlap() {
    let r = run(&[&LLAMA70_ROW1[..], &["false"][..]].concat());
    assert_eq!(r.code, 0, "{}", r.stderr);
    let line = r
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with("TP comm"))
        .expect("a TP comm line");
    assert!(line.contains("hidden by"), "{line}");
    assert!(!line.contains("(TP comm overlap)"), "{line}");
    assert!(
        line.contains("dgrad GEMMs") && line.contains("TP comm overlap is off"),
        "{line}"
    );
    let off = json(&[&LLAMA70_ROW1[..], &["false", "--format", "json"][..]].concat());
    let tp = off["plans"][0]["terms"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["kind"] == "tp_comm")
        .unwrap()
        .clone();
    assert_eq!(tp["hidden_by"], "dgrad_gemms", "{tp}");
    // With the overlap on, the chunked overlap is what hides it.
    let on = json(&[&LLAMA70_ROW1[..], &["true", "--format", "json"][..]].concat());
    let tp = on["plans"][0]["terms"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["kind"] == "tp_comm")
        .unwrap()
        .clone();
    assert_eq!(tp["hidden_by"], "neighbouring_gemms", "{tp}");
}

/// On GB200 NVL72 (4 GPUs per tray) a TP 8 group spans two trays but stays on NVLink: `eval`
/// said "TP ... on NVLink" while `plan`'s "why the best plan" said "TP 8: ACROSS nodes, on the
/// network". The reading now follows the link the cost model used.
#[test]
fn why_the_best_plan_names_the_link_the_cost_model_used_for_tp() {
    let args = [
        "plan",
        "--model",
        "llama3-70b",
        "--gpu",
        "gb200-nvl72",
        "--gpus-per-node",
        "4",
        "--nodes",
        "8",
        "--global-batch",
        "256",
        "--tp",
        "8",
        "--pp",
        "4",
        "--top",
        "1",
    ];
    let r = run(&args);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let planned = json(&[&args[..], &["--format", "json"][..]].concat());
    assert_eq!(planned["plans"][0]["comm"]["tp"]["link"], "nvlink");
    let tp = r
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with("TP 8:"))
        .expect("a TP line under why the best plan");
    assert!(!tp.contains("network"), "{tp}");
    assert!(tp.contains("on NVLink"), "{tp}");
    // PP 4 over 32 GPUs of one NVLink segment: not "stages share a node".
    assert_eq!(planned["plans"][0]["comm"]["pp"]["link"], "nvlink");
    let pp = r
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with("PP 4:"))
        .expect("a PP line");
    assert!(!pp.contains("share a node"), "{pp}");
    assert!(pp.contains("NVLink domain"), "{pp}");
}
