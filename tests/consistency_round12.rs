//! Regressions from the twelfth consistency round: the same quantity printed by two commands or
//! outputs must read the same (ZeRO labels, expert-tensor degrees, sequence parallelism, step
//! times, the time to train's basis, the memory margin), and `--megatron-args` reads tpsim's own
//! lines back quietly (each test names the finding it guards).

mod common;
use common::{json, run, scratch};

const LLAMA70B: [&str; 8] = [
    "--model",
    "llama3-70b",
    "--nodes",
    "8",
    "--global-batch",
    "512",
    "--seq-len",
    "8192",
];

const QWEN3: [&str; 10] = [
    "--model",
    "qwen3-30b-a3b",
    "--nodes",
    "4",
    "--global-batch",
    "256",
    "--seq-len",
    "4096",
    "--ep",
    "8",
];

/// The cell of `plan`'s table in row `rank` under the column `name`.
fn cell(table: &str, rank: &str, name: &str) -> String {
    let header = table
        .lines()
        .find(|l| l.contains(&format!(" {name} ")))
        .unwrap_or_else(|| panic!("no column {name:?}:\n{table}"));
    let column = header
        .trim_matches(['│', ' '])
        .split('┆')
        .position(|c| c.trim() == name)
        .unwrap();
    row_cells(table, rank)[column].clone()
}

fn args<'a>(first: &[&'a str], rest: &[&'a str]) -> Vec<&'a str> {
    first.iter().chain(rest).copied().collect()
}

/// The cells of a comfy-table row whose first cell is `first`.
fn row_cells(table: &str, first: &str) -> Vec<String> {
    table
        .lines()
        .find(|l| {
            l.starts_with('│')
                && l.trim_start_matches(['│', ' '])
                    .starts_with(&format!("{first} "))
        })
        .unwrap_or_else(|| panic!("no row {first:?}:\n{table}"))
        .trim_matches(['│', ' '])
        .split('┆')
        .map(|c| c.trim().to_string())
        .collect()
}

/// `compare`'s plan row wrote "zero1" where `eval`'s plan line, `--emit`'s header and `plan`'s
/// notes say "ZeRO-1" (and `plan`'s zero column "1"); `sweep`'s best-plan cell the same. Both now
/// write "ZeRO-" and the zero column's label.
#[test]
fn compare_and_sweep_name_zero_as_the_other_outputs_do() {
    let r = run(&args(&["compare"], &LLAMA70B));
    assert_eq!(r.code, 0, "{}", r.stderr);
    let plan = row_cells(&r.stdout, "plan");
    let compared = json(&args(&["compare", "--format", "json"], &LLAMA70B));
    for (cell, side) in [(&plan[3], "a"), (&plan[4], "b")] {
        let zero = compared[side]["zero"].as_u64().unwrap();
        assert!(
            cell.ends_with(&format!(" ZeRO-{zero}")) && !cell.contains("zero"),
            "{cell}"
        );
    }
    let r = run(&args(
        &[
            "sweep",
            "--axis",
            "nodes",
            "--values",
            "8",
            "--model",
            "llama3-70b",
        ],
        &LLAMA70B[4..],
    ));
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains(" recompute none ZeRO-1 ") && !r.stdout.contains("zero1"),
        "{}",
        r.stdout
    );
}

/// `accuracy`'s searched settings said "ZeRO-3" for plans that keep their gathered parameters
/// (its plan line: "ZeRO-3 (no resharding after forward)"), so `eval --zero 3` from it priced
/// another plan; it now writes the zero column's "3 keep".
#[test]
fn accuracy_names_a_kept_zero3_as_plan_does() {
    let r = run(&[
        "accuracy",
        "--runs",
        "validation/modern_runs.yaml",
        "--run",
        "mbridge-25.11-pretrain-llama3_8b-h100-8g-fp8-gbs128",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let all = format!("{}{}", r.stdout, r.stderr);
    assert!(
        all.contains("ZeRO-3 (no resharding after forward)"),
        "the run no longer keeps its parameters: {all}"
    );
    assert!(
        all.contains("searched: recompute none, ZeRO-3 keep, "),
        "{all}"
    );
}

/// The report's plan labels ("t4·p1·d8·e8") dropped etp 1 beside ep, which `plan`'s table shows
/// and one-line messages name ("ep 8 etp 1"): read back without it, etp is taken as tp. The
/// labels now carry "·et1", and the axis says what "et" is.
#[test]
fn report_labels_carry_etp_beside_ep() {
    let dir = scratch("consistency12", "report-etp");
    let plan = dir.join("qwen.yaml");
    let mut a = args(&["plan"], &QWEN3);
    let path = plan.to_str().unwrap().to_string();
    a.extend(["--save", &path]);
    let r = run(&a);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let out = dir.join("report");
    let r = run(&["report", &path, "--out", out.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let svg = std::fs::read_to_string(out.join("memory.svg")).unwrap();
    assert!(svg.contains("t4·p1·d8·e8·et1"), "no etp in the labels");
    assert!(svg.contains("degrees t·c·p·d·e·et;"), "axis description");
}

/// `plan`'s `--emit` note named the plan `--emit` writes with "... ZeRO-3 sp", where the offload
/// note and the nothing-fits line say "sequence-parallel" before the micro-batch; it now uses
/// their words.
#[test]
fn emit_note_names_its_plan_in_the_offload_notes_words() {
    let r = run(&args(
        &[
            "plan",
            "--framework",
            "deepspeed",
            "--overlap-param-gather",
            "true",
        ],
        &LLAMA70B,
    ));
    assert_eq!(r.code, 0, "{}", r.stderr);
    let note = format!("{}{}", r.stdout, r.stderr)
        .lines()
        .find(|l| l.starts_with("note: --emit deepspeed cannot write #1"))
        .unwrap_or_else(|| panic!("no emit note:\n{}{}", r.stdout, r.stderr))
        .to_string();
    let words = note
        .split_once("it writes the fastest plan it can: ")
        .unwrap()
        .1;
    assert!(words.contains(" sequence-parallel mb "), "{note}");
    assert!(!words.contains(" sp"), "{note}");
}

/// `--megatron-args /path/launch.sh` (a file without the `@` that reads files) was read as a
/// launch line and failed with "Megatron arguments lack --num-layers"; it now says to write `@`.
#[test]
fn megatron_args_given_a_file_without_at_says_to_use_at() {
    let dir = scratch("consistency12", "megatron-path");
    let file = dir.join("launch.sh");
    std::fs::write(
        &file,
        "--num-layers 32 --hidden-size 4096 --num-attention-heads 32",
    )
    .unwrap();
    let path = file.to_str().unwrap();
    let r = run(&["eval", "--megatron-args", path, "--nodes", "1"]);
    common::assert_one_line_error(
        &r,
        &[
            &format!("--megatron-args {path}"),
            &format!("write --megatron-args @{path}"),
        ],
        &["lack --num-layers"],
        "a path without @",
    );
}

/// Reading back `--emit megatron`'s own Megatron-FSDP line said "skipped: --ckpt-format", a flag
/// the line must carry (Megatron-FSDP requires fsdp_dtensor) and that changes nothing tpsim
/// models: the round trip is quiet now, and a format Megatron-LM refuses beside Megatron-FSDP is
/// refused.
#[test]
fn megatron_fsdp_round_trip_says_nothing_of_ckpt_format() {
    let r = run(&args(
        &["plan", "--zero", "3", "--emit", "megatron"],
        &LLAMA70B,
    ));
    assert_eq!(r.code, 0, "{}", r.stderr);
    let line = r.stdout.trim().to_string();
    assert!(line.contains("--ckpt-format fsdp_dtensor"), "{line}");
    let back = run(&["eval", "--megatron-args", &line, "--nodes", "8"]);
    assert_eq!(back.code, 0, "{}", back.stderr);
    assert!(
        !back.stderr.contains("skipped") && !back.stderr.contains("ckpt-format"),
        "{}",
        back.stderr
    );
    let refused = line.replace("--ckpt-format fsdp_dtensor", "--ckpt-format torch_dist");
    let r = run(&["eval", "--megatron-args", &refused, "--nodes", "8"]);
    common::assert_one_line_error(
        &r,
        &["--ckpt-format torch_dist", "fsdp_dtensor"],
        &[],
        "Megatron-FSDP with another checkpoint format",
    );
}

/// `sweep`'s train column had no line saying what it rests on, where `plan` prints "train: 15.00T
/// tokens in N steps of M tokens"; it now says it, each point's steps where the tokens per step
/// differ from point to point.
#[test]
fn sweep_says_what_its_train_column_rests_on() {
    let base = [
        "sweep",
        "--model",
        "llama3-70b",
        "--nodes",
        "8",
        "--seq-len",
        "8192",
        "--tokens",
        "15T",
    ];
    let r = run(&args(
        &base,
        &["--axis", "global-batch", "--values", "256,512"],
    ));
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains("train: 15.00T tokens in whole steps of each point's global batch x sequence length: 7152558 steps of 2.1M tokens at 256, 3576279 steps of 4.2M tokens at 512, at each point's step time"),
        "{}",
        r.stdout
    );
    // One tokens per step: the count `plan` prints.
    let r = run(&args(
        &base,
        &[
            "--global-batch",
            "512",
            "--axis",
            "gpu",
            "--values",
            "h100-sxm-80g",
        ],
    ));
    assert_eq!(r.code, 0, "{}", r.stderr);
    let p = run(&args(&["plan", "--tokens", "15T"], &LLAMA70B));
    let basis = "train: 15.00T tokens in 3576279 steps of 4.2M tokens, at each ";
    assert!(p.stdout.contains(basis), "{}", p.stdout);
    assert!(
        r.stdout.contains(
            "train: 15.00T tokens in 3576279 steps of 4.2M tokens, at each point's step time"
        ),
        "{}",
        r.stdout
    );
}

/// `plan`'s train line gave #1's step with three decimals ("55.185 s") beside the table's
/// "55.19" and `--emit`'s note's "55.19 s per step": one-line mentions now print the table's.
#[test]
fn plan_train_line_gives_the_tables_step_time() {
    let r = run(&args(&["plan", "--tokens", "15T", "--top", "1"], &LLAMA70B));
    assert_eq!(r.code, 0, "{}", r.stderr);
    let step = cell(&r.stdout, "1", "step s");
    assert!(
        r.stdout.contains(&format!("(#1: {step} s per step, ")),
        "{step}: {}",
        r.stdout
    );
    let e = run(&args(
        &["plan", "--tokens", "15T", "--emit", "megatron"],
        &LLAMA70B,
    ));
    assert!(
        e.stderr.contains(&format!("to train at {step} s per step")),
        "{}",
        e.stderr
    );
}

/// The offload note named a plan that fits without saying it keeps no memory margin; where no
/// offloaded count keeps it (GPT-3 175B on 32 GB200s: 72 of 96 layers at 179.6 GiB, the host too
/// full for more), it says so now in the memory-range line's words, and gives #1's step as the
/// table does.
#[test]
fn offload_note_says_when_its_plan_keeps_no_margin() {
    let r = run(&[
        "plan",
        "--model",
        "gpt3-175b",
        "--gpu",
        "gb200-nvl72",
        "--nodes",
        "8",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let note = r
        .stdout
        .lines()
        .find(|l| l.starts_with("note: offloading the activations of"))
        .unwrap_or_else(|| panic!("no offload note:\n{}", r.stdout));
    assert!(
        note.contains(
            " GiB (no memory margin: measured peaks ran up to 18% above tpsim's (95th percentile), "
        ),
        "{note}"
    );
    let range = r
        .stdout
        .lines()
        .find(|l| l.starts_with("memory range:"))
        .unwrap();
    assert!(
        range.contains("measured peaks ran up to 18% above tpsim's (95th percentile), "),
        "{range}"
    );
    let step = cell(&r.stdout, "1", "step s");
    assert!(
        note.contains(&format!(" against #1's {step} s, ")),
        "{note}"
    );
}

/// `compare` of ZeRO-3 keeping its gathered parameters against ZeRO-3 regathering them (plan
/// labels "ZeRO-3 keep" and "ZeRO-3") named no cause for the gathers' difference; it names the
/// stage as the zero column reads it now.
#[test]
fn compare_names_a_kept_zero3_as_the_gathers_cause() {
    let dir = scratch("consistency12", "compare-keep");
    let base = [
        "plan",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--global-batch",
        "64",
        "--seq-len",
        "8192",
        "--framework",
        "torchtitan",
        "--zero",
        "3",
        "--tp",
        "1",
        "--pp",
        "1",
        "--micro-batch",
        "1",
    ];
    let mut files = Vec::new();
    for keep in ["false", "true"] {
        let file = dir.join(format!("reshard-{keep}.yaml"));
        let path = file.to_str().unwrap().to_string();
        let r = run(&args(
            &base,
            &["--reshard-after-forward", keep, "--save", &path],
        ));
        assert_eq!(r.code, 0, "{}", r.stderr);
        files.push(path);
    }
    let r = run(&["compare", "--plan", &files[0], "--plan", &files[1]]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let plan = row_cells(&r.stdout, "plan");
    assert!(plan[3].ends_with(" ZeRO-3 keep"), "{}", plan[3]);
    assert!(plan[4].ends_with(" ZeRO-3"), "{}", plan[4]);
    assert!(
        r.stdout
            .lines()
            .any(|l| l.contains(", DP parameter gathers ")
                && l.contains(" points less (ZeRO 3 keep against 3)")),
        "{}",
        r.stdout
    );
}
