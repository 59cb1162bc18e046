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

/// The step time `json` gives plan #1 (or the evaluated plan), rounded as the README's prose
/// writes it.
fn step_words(value: &serde_json::Value) -> String {
    format!(
        "{:.1} s",
        value["plans"][0]["time"]["step_s"].as_f64().unwrap()
    )
}

/// The README's prose under the Megatron-LM launch line said "The script's plan takes 35.0 s per
/// step; the fastest plan Megatron-LM can run for the same job, found below, takes 28.8 s", while
/// the block above it printed 36.533 s and the plan "below" was another job (4,096 tokens, not
/// the script's 8,192). Each number the paragraph quotes is what the command it names prints.
#[test]
fn readme_prose_under_the_launch_line_quotes_what_the_commands_print() {
    let readme = std::fs::read_to_string(format!("{}/README.md", common::ROOT)).unwrap();
    let prose = readme
        .split("The script's plan takes")
        .nth(1)
        .and_then(|rest| rest.split("### Configs out").next())
        .expect("the paragraph after the launch-line example");
    let prose = prose.split_whitespace().collect::<Vec<_>>().join(" ");
    let script = json(&[
        "eval",
        "--nodes",
        "16",
        "--megatron-args",
        "@examples/megatron/llama3-70b.sh",
        "--format",
        "json",
    ]);
    assert!(
        prose.starts_with(&format!("{} per step", step_words(&script))),
        "README: {prose}"
    );
    let job = [
        "plan",
        "--model",
        "llama3-70b",
        "--nodes",
        "16",
        "--global-batch",
        "512",
        "--top",
        "1",
        "--format",
        "json",
    ];
    assert!(
        prose.contains("`tpsim plan --model llama3-70b --nodes 16 --global-batch 512`"),
        "README: {prose}"
    );
    let best = json(&job);
    // The same job: the script's model shape, sequence and batch.
    assert_eq!(
        best["training"]["seq_len"], script["training"]["seq_len"],
        "{prose}"
    );
    assert_eq!(best["model"]["params"], script["model"]["params"]);
    assert!(
        prose.contains(&format!(
            "takes {} per step with Megatron-Core's overlaps on",
            step_words(&best)
        )),
        "README: {prose}"
    );
    let off = json(
        &[
            &job[..],
            &[
                "--tp-comm-overlap",
                "false",
                "--overlap-grad-reduce",
                "false",
                "--overlap-param-gather",
                "false",
            ][..],
        ]
        .concat(),
    );
    assert!(
        prose.contains(&format!(
            "and {} with the script's overlaps",
            step_words(&off)
        )),
        "README: {prose}"
    );
}

/// The README said DeepSeek-V3's uneven pipeline puts "the three dense layers on the first"
/// stage; the plan it shows puts two layers there (the embedding counts as one), so the third
/// dense layer sits on the second stage.
#[test]
fn readme_says_where_deepseek_v3_dense_layers_sit_as_eval_prints_it() {
    let readme = std::fs::read_to_string(format!("{}/README.md", common::ROOT)).unwrap();
    let flat = readme.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        !flat.contains("mix of layers — the three dense layers on the first"),
        "README still says so"
    );
    let r = run(&[
        "eval",
        "--model",
        "deepseek-v3",
        "--nodes",
        "256",
        "--global-batch",
        "4096",
        "--allow-uneven-pp",
        "--tp",
        "2",
        "--pp",
        "16",
        "--ep",
        "8",
        "--micro-batch",
        "1",
        "--sequence-parallel",
        "--recompute",
        "selective",
        "--zero",
        "1",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout
            .contains("layers per stage: first 2, middle 4, last 3"),
        "{}",
        r.stdout
    );
    assert!(
        flat.contains("two of the three dense layers on the first (2 layers), the third dense layer and three MoE layers on the second"),
        "README"
    );
}

/// The "why the best plan" TP line said "(plus what recompute repeats)" for a plan with recompute
/// none (the README's 512B example), and under torchtitan with sequence parallelism it dropped
/// "as all-gathers and reduce-scatters" because torchtitan does not gather the inputs again.
#[test]
fn why_the_best_plan_tp_words_follow_the_plan() {
    let tp_line = |args: &[&str]| {
        let r = run(args);
        assert_eq!(r.code, 0, "{}", r.stderr);
        r.stdout
            .lines()
            .find(|l| l.trim_start().starts_with("TP ") && l.contains("every layer"))
            .expect("a TP line")
            .to_string()
    };
    let none = tp_line(&[
        "plan",
        "--params",
        "512B",
        "--nodes",
        "32",
        "--top",
        "1",
        "--recompute",
        "none",
    ]);
    assert!(!none.contains("recompute repeats"), "{none}");
    let full = tp_line(&[
        "plan",
        "--params",
        "512B",
        "--nodes",
        "32",
        "--top",
        "1",
        "--recompute",
        "full",
    ]);
    assert!(full.contains("(plus what recompute repeats)"), "{full}");
    let titan = tp_line(&[
        "plan",
        "--model",
        "llama3-70b",
        "--nodes",
        "16",
        "--global-batch",
        "512",
        "--framework",
        "torchtitan",
        "--tp",
        "2",
        "--sequence-parallel",
        "true",
        "--top",
        "1",
    ]);
    assert!(
        titan.contains("as all-gathers and reduce-scatters")
            && !titan.contains("gathers the column-split GEMMs' inputs again"),
        "{titan}"
    );
}

/// A plan without a pipeline printed "pipeline schedule: the simulated 1F1B step equals the closed
/// form (...; bubble ratio (p-1)/(v·m) = 0.000)", a schedule it does not run; and the most loaded
/// GPU was named with Rust's variant name mid-sentence ("Only stage").
#[test]
fn a_plan_without_a_pipeline_says_it_has_no_schedule() {
    let r = run(&[
        "eval",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--tp",
        "1",
        "--pp",
        "1",
        "--micro-batch",
        "1",
        "--global-batch",
        "16",
        "--zero",
        "3",
        "--recompute",
        "full",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let schedule = r
        .stdout
        .lines()
        .find(|l| l.starts_with("pipeline schedule:"))
        .expect("a schedule line");
    assert!(schedule.contains("none (pp 1"), "{schedule}");
    assert!(!schedule.contains("(p-1)/(v·m)"), "{schedule}");
    assert!(
        r.stdout
            .contains("memory per GPU (most loaded: the only stage,"),
        "{}",
        r.stdout
    );
    assert!(!r.stdout.contains("Only stage"), "{}", r.stdout);
}

/// A bubble ratio below 0.0005 printed as 0.000 next to a bubble the table shows as non-zero.
#[test]
fn a_small_bubble_ratio_keeps_its_digits() {
    let r = run(&[
        "eval",
        "--params",
        "13B",
        "--nodes",
        "4",
        "--global-batch",
        "2048",
        "--tp",
        "8",
        "--pp",
        "2",
        "--vpp",
        "4",
        "--micro-batch",
        "1",
        "--recompute",
        "none",
        "--zero",
        "1",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let schedule = r
        .stdout
        .lines()
        .find(|l| l.starts_with("pipeline schedule:"))
        .expect("a schedule line");
    // (p-1)/(v·m) = 1/(4·1024) = 2.4e-4.
    assert!(schedule.contains("(p-1)/(v·m) = 2.4e-4"), "{schedule}");
}

/// `compare` printed step-time differences to the hundredth of a second, so a 5 ms difference the
/// verdict calls 0.1% read "0.00".
#[test]
fn compare_prints_seconds_to_the_millisecond() {
    let r = run(&["compare", "--params", "512B", "--nodes", "32"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let step = r
        .stdout
        .lines()
        .find(|l| l.contains("time per step") && l.contains(" step "))
        .expect("a step row");
    let cells: Vec<&str> = step.split('┆').map(str::trim).collect();
    let a = cells[3];
    assert_eq!(
        a.split('.').nth(1).map(str::len),
        Some(3),
        "step seconds to three decimals: {step}"
    );
}
