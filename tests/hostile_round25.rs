//! Hostile input, round 25: the V-shaped pipeline schedules (`--pp-schedule zbv|dualpipev`) in
//! plan files, in `plan`'s pins and in the fixes offered; word keys of spec files given a list or
//! a mapping; a plan file's optimizer states under a typed `--framework`; the sweep CSV's
//! schedule. Every error case checks exit 2, one line on stderr and the words that name the
//! value, the rule and the fix.

mod common;

use common::*;
use std::path::Path;

/// A hand-written torchtitan plan file of Llama 3 8B on one node, with `extra` top-level lines
/// and `plan` lines, written as `dir/name` (its path returned).
fn plan_file(dir: &Path, name: &str, extra: &str, plan: &str) -> String {
    let path = dir.join(name);
    std::fs::write(
        &path,
        format!(
            "model: llama3-8b\ngpu: h100-sxm-80g\nnodes: 1\nframework: torchtitan\n{extra}plan:\n{plan}"
        ),
    )
    .unwrap();
    path.to_str().unwrap().to_string()
}

/// `command` (eval or plan) of Llama 3 8B on one node under torchtitan, with `args`.
fn torchtitan(args: &[&str]) -> Run {
    let mut all = vec![
        args[0],
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--framework",
        "torchtitan",
    ];
    all.extend(&args[1..]);
    run(&all)
}

/// A plan file's `pp_schedule: dualpipev` with too few micro-batches was refused as
/// "--pp-schedule dualpipev needs ... 2 x pp: 2 = 4 ...; raise --global-batch (or --local-batch)",
/// and its `vpp: 4` beside `pp_schedule: zbv` as "--pp-schedule zbv ... but --vpp is 4; give
/// --vpp 2": flags the user never typed, for lines of the file. `pp_schedule: zbv` on a file of
/// pp 1 was noted as "--pp-schedule zbv has no pipeline ...; it applies to plans with --pp 2".
/// Each names the file's keys now.
#[test]
fn a_plan_files_v_schedule_is_named_by_its_keys() {
    let dir = scratch("hostile25", "v-file");
    let few = plan_file(
        &dir,
        "few.yaml",
        "global_batch: 4\npp_schedule: dualpipev\n",
        "  tp: 2\n  pp: 2\n  dp: 2\n  vpp: 2\n",
    );
    assert_one_line_error(
        &run(&["eval", "--plan", &few]),
        &[
            "pp_schedule: dualpipev needs at least as many micro-batches",
            "2 x pp: 2 = 4",
            "but it runs 2",
            "raise global_batch (or local_batch)",
            "or use --pp-schedule zbv",
        ],
        &["--pp-schedule dualpipev", "--global-batch", "--local-batch"],
        "dualpipev in the file",
    );
    // A typed --global-batch keeps its flag, the file's schedule its key.
    assert_one_line_error(
        &run(&["eval", "--plan", &few, "--global-batch", "6"]),
        &[
            "pp_schedule: dualpipev",
            "but it runs 3",
            "raise --global-batch",
        ],
        &["--pp-schedule dualpipev"],
        "dualpipev in the file, --global-batch typed",
    );
    let four = plan_file(
        &dir,
        "four.yaml",
        "global_batch: 8\npp_schedule: zbv\n",
        "  tp: 1\n  pp: 2\n  dp: 4\n  vpp: 4\n",
    );
    assert_one_line_error(
        &run(&["eval", "--plan", &four]),
        &[
            "pp_schedule: zbv runs exactly two model chunks",
            "but vpp is 4",
            "give vpp: 2",
        ],
        &["--vpp", "--pp-schedule"],
        "zbv with the file's vpp 4",
    );
    // The flag typed over the file keeps its word, and the file's vpp its key.
    assert_one_line_error(
        &run(&["eval", "--plan", &four, "--pp-schedule", "dualpipev"]),
        &["--pp-schedule dualpipev runs exactly two", "vpp is 4 in"],
        &["--vpp"],
        "typed schedule, the file's vpp",
    );
    let flat = plan_file(
        &dir,
        "flat.yaml",
        "global_batch: 8\npp_schedule: zbv\n",
        "  tp: 2\n  pp: 1\n  dp: 4\n",
    );
    let r = run(&["eval", "--plan", &flat]);
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    assert!(
        r.stderr.contains("note: pp_schedule: zbv in ")
            && r.stderr.contains("plans with pp: 2 or more"),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains("--pp-schedule zbv"), "{}", r.stderr);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `eval --framework torchtitan --pp-schedule zbv --pp 8 --vpp 2` on 24 layers (3 per stage; the
/// same on Qwen3-30B-A3B's 48 layers at pp 16) was refused as "--vpp 2 does not divide the 3
/// layers of each stage; valid: 1, 3", and both offered values are refused in turn (a V runs
/// exactly two chunks per GPU). An uneven split said "valid here: 1". The fix is a depth now,
/// and each one offered runs.
#[test]
fn a_v_schedules_odd_stages_offer_depths_that_run() {
    let r = torchtitan(&[
        "eval",
        "--layers",
        "24",
        "--pp-schedule",
        "zbv",
        "--pp",
        "8",
        "--vpp",
        "2",
        "--global-batch",
        "64",
    ]);
    assert_one_line_error(
        &r,
        &[
            "--pp-schedule zbv runs two model chunks of whole layers per GPU",
            "--pp 8 leaves 3 layers on each stage",
            "give a --pp whose stages split in two, valid: 2, 4",
        ],
        &["valid: 1, 3"],
        "zbv on 3 layers per stage",
    );
    let r = torchtitan(&[
        "eval",
        "--layers",
        "27",
        "--allow-uneven-pp",
        "--pp-schedule",
        "dualpipev",
        "--pp",
        "8",
        "--vpp",
        "2",
        "--global-batch",
        "64",
    ]);
    assert_one_line_error(
        &r,
        &["--pp 8 splits the 27 layers unevenly", "valid: 2, 4"],
        &["valid here: 1"],
        "dualpipev on an uneven split",
    );
    for (layers, pp) in [("24", "2"), ("24", "4"), ("27", "2"), ("27", "4")] {
        let r = torchtitan(&[
            "eval",
            "--layers",
            layers,
            "--allow-uneven-pp",
            "--pp-schedule",
            "zbv",
            "--pp",
            pp,
            "--vpp",
            "2",
            "--global-batch",
            "64",
        ]);
        assert!(
            r.code == 0 || r.code == 1,
            "{layers} layers at pp {pp}: {}",
            r.stderr
        );
    }
}

/// `plan --pp-schedule zbv --vpp 3` said "--vpp 3 admits no valid plan ... (the search offers
/// --vpp 1, 2)", `--pp-schedule dualpipev --pp 8 --global-batch 8` "--pp 8 admits no valid plan
/// ... (the search offers --pp 1, 2, 4)", `--pp 8` on 24 layers under zbv the same, and
/// `--pp 2 --vpp 1` that the pins "each admit valid plans but not together": none named the V's
/// rule, which `eval` names. The `--local-batch` refusal gave interleaved 1F1B's multiple of pp,
/// a rule the V schedules do not have.
#[test]
fn plan_pins_under_a_v_schedule_name_its_rule() {
    let cases: [(&[&str], &[&str]); 5] = [
        (
            &["--pp-schedule", "zbv", "--vpp", "3", "--global-batch", "64"],
            &[
                "--vpp 3 admits no valid plan under --pp-schedule zbv",
                "exactly two model chunks per GPU",
                "pipelined plans take --vpp 2",
            ],
        ),
        (
            &[
                "--pp-schedule",
                "dualpipev",
                "--pp",
                "8",
                "--global-batch",
                "8",
            ],
            &[
                "--pp 8 admits no valid plan under --pp-schedule dualpipev",
                "at least 2 x pp = 16 micro-batches",
                "--global-batch 8",
                "raise --global-batch",
                "or use --pp-schedule zbv",
            ],
        ),
        (
            &[
                "--pp-schedule",
                "dualpipev",
                "--vpp",
                "2",
                "--global-batch",
                "2",
            ],
            &["--vpp 2 admits no valid plan under --pp-schedule dualpipev"],
        ),
        (
            &[
                "--layers",
                "24",
                "--pp-schedule",
                "zbv",
                "--pp",
                "8",
                "--global-batch",
                "64",
            ],
            &[
                "--pp 8 admits no valid plan under --pp-schedule zbv",
                "the 24 layers leave 3 on each of its 8 stages",
                "the search offers --pp 1, 2, 4",
                "or use --pp-schedule 1f1b",
            ],
        ),
        (
            &[
                "--pp-schedule",
                "zbv",
                "--pp",
                "2",
                "--vpp",
                "1",
                "--global-batch",
                "64",
            ],
            &["exactly two model chunks per GPU", "give --vpp 2"],
        ),
    ];
    for (extra, needles) in cases {
        let mut args = vec!["plan"];
        args.extend(extra);
        assert_one_line_error(
            &torchtitan(&args),
            needles,
            &["admits no valid plan for this model", "not together"],
            &extra.join(" "),
        );
    }
    let r = torchtitan(&[
        "plan",
        "--pp-schedule",
        "zbv",
        "--pp",
        "4",
        "--global-batch",
        "8",
        "--local-batch",
        "3",
    ]);
    assert_one_line_error(
        &r,
        &["--local-batch 3 admits none of the plans"],
        &["multiple of --pp"],
        "a local batch under zbv",
    );
}

/// `plan --framework torchtitan --pp-schedule zbv --pp 1` (or `--vpp 1`, which leaves a V only
/// plans without a pipeline) printed plans of pp 1 without a word: the schedule asked for ordered
/// nothing. `eval` says so of its one plan; `plan` now says it too.
#[test]
fn plan_says_when_its_pins_leave_a_v_schedule_nothing_to_order() {
    for pin in [["--pp", "1"], ["--vpp", "1"]] {
        let r = torchtitan(&[
            "plan",
            "--pp-schedule",
            "zbv",
            pin[0],
            pin[1],
            "--global-batch",
            "64",
        ]);
        assert!(r.code == 0 || r.code == 1, "{pin:?}: {}", r.stderr);
        let note = format!(
            "note: --pp-schedule zbv orders the micro-batches of a pipeline, and {} {}",
            pin[0], pin[1]
        );
        assert!(r.stderr.contains(&note), "{pin:?}: {}", r.stderr);
        assert!(
            r.stderr.contains(&format!("drop {} {}", pin[0], pin[1])),
            "{pin:?}: {}",
            r.stderr
        );
    }
    // Unpinned, the search has pipelines to schedule: no note.
    let r = torchtitan(&["plan", "--pp-schedule", "zbv", "--global-batch", "64"]);
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    assert!(
        !r.stderr.contains("orders the micro-batches"),
        "{}",
        r.stderr
    );
}

/// A word key given a list or a mapping (`recompute: [none]`, `framework: {a: 1}`,
/// `pp_schedule:` with a `- zbv` line, a model file's `norm: [rmsnorm]`) was refused as "invalid
/// type: sequence, expected a YAML tag starting with '!'": a fix tpsim refuses in turn (tags are
/// not read), where the rule is one name written alone.
#[test]
fn a_word_key_given_a_list_or_a_mapping_says_to_write_one_name() {
    let dir = scratch("hostile25", "word-keys");
    for (name, extra, plan, key, what) in [
        (
            "recompute.yaml",
            "global_batch: 8\n",
            "  tp: 2\n  pp: 1\n  dp: 4\n  recompute: [none]\n",
            "plan.recompute: a list where one name goes",
            "after recompute:",
        ),
        (
            "schedule.yaml",
            "global_batch: 8\npp_schedule:\n  - zbv\n",
            "  tp: 2\n  pp: 1\n  dp: 4\n",
            "pp_schedule: a list where one name goes",
            "after pp_schedule:",
        ),
        (
            "exchange.yaml",
            "global_batch: 8\ncp_exchange: {kv-ring: 1}\n",
            "  tp: 2\n  pp: 1\n  dp: 4\n",
            "cp_exchange: a mapping where one name goes",
            "without braces or nested keys",
        ),
    ] {
        let path = plan_file(&dir, name, extra, plan);
        assert_one_line_error(
            &run(&["eval", "--plan", &path]),
            &[key, what, "write the name alone"],
            &["YAML tag"],
            name,
        );
    }
    let model = std::fs::read_to_string(format!("{ROOT}/models/llama3-8b.yaml")).unwrap();
    let norm = model
        .lines()
        .find(|l| l.starts_with("norm:"))
        .expect("a norm line");
    let path = dir.join("model.yaml");
    std::fs::write(&path, model.replace(norm, "norm: [rmsnorm]")).unwrap();
    assert_one_line_error(
        &run(&[
            "eval",
            "--model",
            path.to_str().unwrap(),
            "--nodes",
            "1",
            "--tp",
            "8",
        ]),
        &["norm: a list where one name goes", "after norm:"],
        &["YAML tag"],
        "model norm",
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `eval --plan FILE --framework megatron-core` of a torchtitan file (which `plan --save` writes
/// with `optimizer_states: fp32-params`) was refused as "--optimizer-states fp32-params is not how
/// --framework megatron-core stores its optimizer ...; use --framework torchtitan": a flag never
/// typed, and a fix that undoes the one typed. A file's `pp_schedule: zbv` under it offered "add
/// --framework torchtitan, or drop the schedule", which no flag does. Both name the file's key now,
/// with fixes that keep the framework asked for.
#[test]
fn a_typed_framework_over_a_torchtitan_file_is_refused_in_the_files_words() {
    let dir = scratch("hostile25", "framework-over-file");
    let states = plan_file(
        &dir,
        "states.yaml",
        "global_batch: 8\noptimizer_states: fp32-params\n",
        "  tp: 2\n  pp: 1\n  dp: 4\n",
    );
    assert_one_line_error(
        &run(&["eval", "--plan", &states, "--framework", "megatron-core"]),
        &[
            "optimizer_states: fp32-params in ",
            "is not how --framework megatron-core stores its optimizer",
            "give --optimizer-states fp32 (its own) with it, or drop --framework",
        ],
        &[
            "use --framework torchtitan",
            "--optimizer-states fp32-params",
        ],
        "file states, typed framework",
    );
    let r = run(&[
        "eval",
        "--plan",
        &states,
        "--framework",
        "megatron-core",
        "--optimizer-states",
        "fp32",
    ]);
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    let schedule = plan_file(
        &dir,
        "schedule.yaml",
        "global_batch: 8\npp_schedule: zbv\n",
        "  tp: 2\n  pp: 2\n  dp: 2\n  vpp: 2\n",
    );
    assert_one_line_error(
        &run(&["eval", "--plan", &schedule, "--framework", "megatron-core"]),
        &[
            "pp_schedule: zbv in the plan file",
            "drop --framework megatron-core to run the file's framework, torchtitan, or give --pp-schedule 1f1b",
        ],
        &["add --framework torchtitan", "drop the schedule"],
        "file schedule, typed framework",
    );
    // A file that names another framework beside its V schedule is fixed in the file.
    let own = dir.join("own.yaml");
    std::fs::write(
        &own,
        std::fs::read_to_string(&schedule)
            .unwrap()
            .replace("framework: torchtitan", "framework: megatron-core"),
    )
    .unwrap();
    assert_one_line_error(
        &run(&["eval", "--plan", own.to_str().unwrap()]),
        &["write framework: torchtitan in the file, or pp_schedule: 1f1b"],
        &["add --framework torchtitan"],
        "the file's own framework",
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `sweep --pp-schedule dualpipev --format csv` wrote the framework and the CP exchange on every
/// row but not the schedule the JSON names, so a CSV of DualPipeV plans read as 1F1B ones.
#[test]
fn the_sweep_csv_names_the_pipeline_schedule() {
    let cell = |schedule: &[&str]| {
        let mut args = vec![
            "sweep",
            "--model",
            "llama3-8b",
            "--framework",
            "torchtitan",
            "--axis",
            "nodes",
            "--values",
            "1",
            "--global-batch",
            "64",
            "--format",
            "csv",
        ];
        args.extend(schedule);
        let r = run(&args);
        assert_eq!(r.code, 0, "{}", r.stderr);
        let mut lines = r.stdout.lines();
        let header: Vec<&str> = lines.next().unwrap().split(',').collect();
        let row: Vec<&str> = lines.next().unwrap().split(',').collect();
        let at = header
            .iter()
            .position(|h| *h == "pp_schedule")
            .unwrap_or_else(|| panic!("no pp_schedule column: {header:?}"));
        row[at].to_string()
    };
    assert_eq!(cell(&["--pp-schedule", "dualpipev"]), "dualpipev");
    assert_eq!(cell(&[]), "1f1b");
}
