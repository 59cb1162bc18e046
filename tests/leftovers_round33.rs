//! Leftovers, round 33: what earlier reviews left.
//! - `eval --megatron-args` skipped a flag Megatron-LM does not define (`--tensor-paralel-size 8`)
//!   as one that changes no cost; Megatron-LM's argparse refuses it (`parse_args` in
//!   megatron/training/arguments.py at d98e8a64), so tpsim priced tp 1 for a line that never
//!   runs. Refused now against the list of the flags Megatron-LM defines
//!   (src/emit/megatron_flags.txt), naming the nearest real spelling; launcher flags stay skipped,
//!   and so do flags of earlier Megatron-LM releases and of Megatron-DeepSpeed
//!   (src/emit/megatron_flags_older.txt): a 2021 line with `--DDP-impl local` is valid for the
//!   Megatron-LM it was written for (the lead's review of this round).
//! - a torchrun line without `--nnodes` asked for --nodes as if the line said nothing of the
//!   cluster; torchrun's `--nnodes` defaults to 1 (torch/distributed/run.py), so the line runs on
//!   one node: priced so, with a note naming the default and how to give more nodes.
//! - `plan --help` said "Default: searched." for --tp but not for the other pins `plan` searches
//!   (--recompute, --recompute-num-layers, --zero, --sequence-parallel, --etp,
//!   --reshard-after-forward).
//! - a plan file with `recompute_modules` and no `recompute:` was refused quoting "its
//!   recompute: none", a line the file does not have: now said as left out, eval taking none,
//!   with the fix as a file line.
//! - `sweep --format csv` lacked the memory range's basis that its JSON has beside the memory
//!   numbers (`memory.total_bytes_range_basis`): added, RFC 4180 quoted.

mod common;

use common::*;

const SHAPE: &str = "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096 --micro-batch-size 1 --global-batch-size 256 --bf16 --vocab-size 32000";

fn eval_line(line: &str) -> Run {
    run(&[
        "eval",
        "--megatron-args",
        line,
        "--nodes",
        "1",
        "--format",
        "json",
    ])
}

#[test]
fn a_flag_megatron_lm_does_not_define_is_refused_with_its_nearest_spelling() {
    let r = eval_line(&format!("{SHAPE} --tensor-paralel-size 8"));
    assert_one_line_error(
        &r,
        &[
            "\"--tensor-paralel-size\" is not a Megatron-LM argument",
            "arguments.py",
            "--tensor-model-parallel-size",
            "drop --tensor-paralel-size",
        ],
        &["skipped"],
        "misspelt tensor-parallel flag",
    );
    // The fix runs: the real spelling prices tp 8.
    let fixed = eval_line(&format!("{SHAPE} --tensor-model-parallel-size 8"));
    assert_eq!(fixed.code, 0, "{}", fixed.stderr);
    // Flags Megatron-LM has, and torchrun's own (in a DISTRIBUTED_ARGS array before the
    // script, or between the launcher and the script), are still skipped with a note.
    let script = format!(
        "DISTRIBUTED_ARGS=(--nproc_per_node 8 --nnodes 1 --master_addr localhost --master_port 6000)\nsrun --account=proj --overlap torchrun ${{DISTRIBUTED_ARGS[@]}} pretrain_gpt.py {SHAPE} --lr 3e-4 --log-interval 10\n"
    );
    let dir = scratch("leftovers33", "launchers");
    std::fs::write(dir.join("launch.sh"), script).unwrap();
    let at = format!("@{}", dir.join("launch.sh").display());
    let r = eval_line(&at);
    // 0, or 1 where the plan does not fit: the line was read, not refused.
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    assert!(r.stderr.contains("--lr --log-interval"), "{}", r.stderr);
}

#[test]
fn a_torchrun_line_without_nnodes_runs_on_torchruns_default_one_node() {
    let line = format!(
        "torchrun --nproc_per_node 8 pretrain_gpt.py {SHAPE} --tensor-model-parallel-size 8"
    );
    let r = run(&["eval", "--megatron-args", &line, "--format", "json"]);
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    let out: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(out["cluster"]["nodes"], 1, "{}", r.stdout);
    assert_eq!(out["cluster"]["total_gpus"], 8, "{}", r.stdout);
    assert!(
        r.stderr
            .contains("gives no --nnodes, so tpsim prices torchrun's default, 1 node"),
        "{}",
        r.stderr
    );
    // --nodes still sets the cluster, said as overriding torchrun's default, not a line's value.
    let r = run(&[
        "eval",
        "--megatron-args",
        &line,
        "--nodes",
        "2",
        "--format",
        "json",
    ]);
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    let out: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(out["cluster"]["nodes"], 2, "{}", r.stdout);
    assert!(
        r.stderr.contains(
            "--nodes 2 overrides torchrun's default --nnodes 1 (the launch line gives no --nnodes)"
        ),
        "{}",
        r.stderr
    );
}

#[test]
fn plan_help_says_searched_for_every_pin_plan_searches() {
    let r = run(&["plan", "--help"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    for flag in [
        "--tp",
        "--recompute",
        "--recompute-num-layers",
        "--zero",
        "--sequence-parallel",
        "--etp",
        "--reshard-after-forward",
    ] {
        // The flag's own paragraph: its line and the description up to the blank line.
        let start = r
            .stdout
            .lines()
            .position(|l| {
                l.trim_start()
                    .strip_prefix(flag)
                    .is_some_and(|rest| rest.starts_with(' ') || rest.is_empty())
            })
            .unwrap_or_else(|| panic!("{flag} not in plan --help"));
        let paragraph: Vec<&str> = r
            .stdout
            .lines()
            .skip(start)
            .take_while(|l| !l.trim().is_empty())
            .map(str::trim)
            .collect();
        // Joined as one line: clap wraps "Default:" and "searched" apart.
        let text = paragraph.join(" ");
        assert!(text.contains("Default: searched"), "{flag}: {text}");
    }
}

#[test]
fn a_plan_file_without_recompute_is_not_quoted_as_recompute_none() {
    let dir = scratch("leftovers33", "norecompute");
    let seed = std::fs::read_to_string(format!("{ROOT}/plans/seed-512b-32nodes.yaml")).unwrap();
    assert!(seed.contains("  recompute: selective\n"));
    let without = seed.replace("  recompute: selective\n", "") + "recompute_modules: [core_attn]\n";
    let path = dir.join("plan.yaml");
    std::fs::write(&path, &without).unwrap();
    let r = run(&["eval", "--plan", path.to_str().unwrap()]);
    assert_one_line_error(
        &r,
        &[
            "has no recompute: line under plan:, so eval took none",
            "add recompute: selective under plan:",
        ],
        &["recompute: none"],
        "plan file without recompute:",
    );
    // The fix runs.
    let fixed = without.replace("plan:\n", "plan:\n  recompute: selective\n");
    std::fs::write(&path, fixed).unwrap();
    let r = run(&["eval", "--plan", path.to_str().unwrap()]);
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
}

#[test]
fn sweep_csv_has_the_memory_range_basis_its_json_has() {
    let args = [
        "sweep",
        "--model",
        "llama3-8b",
        "--axis",
        "nodes",
        "--values",
        "1,2",
    ];
    let json_out = json(&[&args[..], &["--format", "json"]].concat());
    let csv = run(&[&args[..], &["--format", "csv"]].concat());
    assert_eq!(csv.code, 0, "{}", csv.stderr);
    let records = csv_records(&csv.stdout);
    let header = &records[0];
    let column = header
        .iter()
        .position(|h| h == "memory.total_bytes_range_basis")
        .unwrap_or_else(|| panic!("no memory.total_bytes_range_basis in {header:?}"));
    let rows = json_out["rows"].as_array().unwrap();
    assert_eq!(records.len(), rows.len() + 1);
    for (record, row) in records[1..].iter().zip(rows) {
        let basis = row["memory"]["total_bytes_range_basis"]
            .as_str()
            .unwrap_or_default();
        assert!(!basis.is_empty(), "{row}");
        assert_eq!(record[column], basis);
        assert_eq!(record.len(), header.len());
    }
}

#[test]
fn flags_of_earlier_megatron_lm_releases_are_skipped_not_refused() {
    // Megatron-LM v2.5 (2021) defines --DDP-impl and --no-async-tensor-model-parallel-allreduce
    // (megatron/arguments.py at tag v2.5); d98e8a64 no longer does. A launch line for that
    // release is valid there, so it reads (the flags skipped as ones tpsim does not price).
    let r = run(&[
        "eval",
        "--framework",
        "megatron-lm-2021",
        "--gpu",
        "a100-sxm-80g",
        "--nodes",
        "2",
        "--megatron-args",
        &format!(
            "{SHAPE} --tensor-model-parallel-size 2 --DDP-impl local --no-async-tensor-model-parallel-allreduce"
        ),
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        !r.stderr.contains("is not a Megatron-LM argument"),
        "{}",
        r.stderr
    );
    // A misspelling of that old flag is still refused.
    let typo = run(&[
        "eval",
        "--framework",
        "megatron-lm-2021",
        "--gpu",
        "a100-sxm-80g",
        "--nodes",
        "2",
        "--megatron-args",
        &format!("{SHAPE} --DDP-implementation local"),
    ]);
    assert_eq!(typo.code, 2, "{}", typo.stderr);
    assert!(
        typo.stderr
            .contains("\"--DDP-implementation\" is not a Megatron-LM argument"),
        "{}",
        typo.stderr
    );
}
