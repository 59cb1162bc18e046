//! Hostile input, round 43, wide over the surfaces earlier rounds touched least (report
//! directories, environment oddities, custom GPU profiles and model files, `accuracy --runs`
//! files that are not files):
//! - `report --out DIR` (and `eval --report DIR`) into a directory an earlier report was written
//!   to, where one of the report's names (`memory.svg`) had become a symlink to a file outside it,
//!   wrote the figure through the link: the user's file was silently replaced by an SVG. A report
//!   holds only regular files tpsim wrote; a link named like one is now refused before any work,
//!   naming the link, where it points and the fix. A folder at one of those names (`timeline.svg/`)
//!   failed the write midway, after the figures before it were replaced: exit 2 with two reports
//!   mixed in the directory, and the error named `--out rep/timeline.svg` with the fix "name a
//!   file inside it". It is refused before any write, naming the report's directory.
//! - `report --out link/rep` (or `--out link`) where `link` is a symlink that leads nowhere (its
//!   target missing, or a loop) was refused as "cannot write there: File exists" (or "Not a
//!   directory"), naming neither the link nor what is missing; it now names the link, its target
//!   and the fix.
//! - `eval --megatron-args` with `--tensor-model-parallel-size= 2` (a space after the '=') was
//!   told to drop the 2 ("follows --tensor-model-parallel-size=, which takes no further value"),
//!   and the line without it was refused in turn for the empty value; the fix now joins them.
//! - `accuracy --runs` on a published-runs file whose run gives both `results.iteration_time_s`
//!   and `derived.iteration_time_s_from_eq3` used the first and dropped the other without a word,
//!   however far apart (10 s against 3.53 s); two step times more than 1% apart are now refused,
//!   naming both keys, their values and the fix.
//! - a published-runs file's `plan.layers_per_virtual_stage` (Megatron-LM's
//!   `--num-layers-per-virtual-pipeline-stage`) was known and never read: given without
//!   `virtual_pipeline_stages`, the run was planned without interleaving, and beside a count that
//!   contradicts it, the count won without a word. It now sets the virtual stages (a stage's
//!   layers over it), and a count that does not divide or contradicts is refused.
//! - a published-runs file's `plan.precision: fp8` (or fp32) was evaluated at 16 bits without a
//!   word; the runs are evaluated with 16-bit GEMMs on A100 profiles (no FP8 tensor cores), so
//!   anything but fp16 or bf16 is refused with the key, the rule and the fix.
//! - a GPU profile's `nvlink_domain_gpus` had no upper bound: 4294967292 (a multiple of the
//!   node's 4) was accepted and printed as "NVLink in 64-GPU segments of 4294967292-GPU racks";
//!   past the 576 GPUs NVIDIA's NVLink Switch System joins in one domain it is now refused.
//!
//! Every error case checks exit 2, one line on stderr and the words that name the value, the rule
//! and the fix; every file case checks the user's file is byte-identical afterwards.
//!
//! Looked at and found sound: stdout on /dev/full (exit 2, one line) and piped into `head` (exit
//! 0); a closed stdout (`>&-`) runs with exit 0 and prints nothing, since Rust's runtime reopens a
//! closed fd 1 on /dev/null before `main` (indistinguishable from `> /dev/null`); `accuracy --runs`
//! on /dev/null, /dev/zero, a directory, an empty file, non-UTF-8, `[]`, `runs: []`, a 200 MiB
//! file, a YAML alias bomb, duplicate ids, a numeric id; `--megatron-args @` on the same and on
//! CRLF scripts; `RAYON_NUM_THREADS` of 0, -1, 1e3, blank and past u64; `--threads` 0, 1025, -1;
//! GPU profiles with zero, tiny and huge bandwidths, latencies, capacities and node sizes; model
//! files with kv_heads past heads, heads not dividing hidden, vocab 1, layers 1, seq_len 1; a
//! sweep CSV whose labels hold quotes and commas; `compare` of plan files of two scenarios; report
//! directories holding the user's index.html, or a file named like the directory.

mod common;

use common::*;

const SUITE: &str = "hostile43";

/// Saves the best plan of Llama 3 8B on one H100 node as `dir/plan.yaml` and returns its path.
fn saved_plan(dir: &std::path::Path) -> String {
    let plan = dir.join("plan.yaml");
    let r = run(&[
        "plan",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--global-batch",
        "64",
        "--save",
        plan.to_str().unwrap(),
    ]);
    assert_eq!(r.code, 0, "plan --save: {}", r.stderr);
    plan.to_string_lossy().into_owned()
}

/// A report directory written once, then one of its figures replaced by a link to the user's file
/// outside it: writing the report again (by `report` or by `eval --report`) wrote the figure
/// through the link and the user's file was lost.
#[test]
fn a_report_never_writes_through_a_link_in_its_directory() {
    let dir = scratch(SUITE, "report-link");
    let plan = saved_plan(&dir);
    let rep = dir.join("rep");
    let rep_s = rep.to_str().unwrap();
    let first = run(&["report", &plan, "--out", rep_s]);
    assert_eq!(first.code, 0, "first report: {}", first.stderr);
    let precious = dir.join("precious.txt");
    std::fs::write(&precious, "the user's notes\n").unwrap();
    std::fs::remove_file(rep.join("memory.svg")).unwrap();
    std::os::unix::fs::symlink("../precious.txt", rep.join("memory.svg")).unwrap();
    for args in [
        vec!["report", plan.as_str(), "--out", rep_s],
        vec!["eval", "--plan", plan.as_str(), "--report", rep_s],
    ] {
        let r = run(&args);
        assert_one_line_error(
            &r,
            &["memory.svg", "link to", "precious.txt", "remove the link"],
            &[],
            &format!("{args:?}"),
        );
        assert_eq!(
            std::fs::read_to_string(&precious).unwrap(),
            "the user's notes\n",
            "{args:?}: the user's file was replaced"
        );
        assert!(
            std::fs::symlink_metadata(rep.join("memory.svg"))
                .unwrap()
                .file_type()
                .is_symlink(),
            "{args:?}: the link was replaced"
        );
    }
    // With the link gone, the same command writes the report again.
    std::fs::remove_file(rep.join("memory.svg")).unwrap();
    let again = run(&["report", &plan, "--out", rep_s]);
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert!(rep.join("memory.svg").is_file());
    let _ = std::fs::remove_dir_all(dir);
}

/// A report directory written once, then its `timeline.svg` replaced by a folder: a second report
/// (of another plan) replaced the figures before it and failed at the folder, leaving two reports
/// mixed, and named `--out rep/timeline.svg` ("name a file inside it"). Refused before any write.
#[test]
fn a_folder_in_a_report_directory_is_refused_before_any_write() {
    let dir = scratch(SUITE, "report-folder");
    let plan = saved_plan(&dir);
    let rep = dir.join("rep");
    let rep_s = rep.to_str().unwrap();
    let first = run(&["report", &plan, "--out", rep_s]);
    assert_eq!(first.code, 0, "first report: {}", first.stderr);
    std::fs::remove_file(rep.join("timeline.svg")).unwrap();
    std::fs::create_dir(rep.join("timeline.svg")).unwrap();
    let names = [
        "index.html",
        "report.json",
        "memory.svg",
        "search.svg",
        "step_time.svg",
    ];
    let before: Vec<Vec<u8>> = names
        .iter()
        .map(|n| std::fs::read(rep.join(n)).unwrap())
        .collect();
    // Another plan (a larger batch), so that a replaced figure differs.
    let other = dir.join("other.yaml");
    let r = run(&[
        "plan",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--global-batch",
        "128",
        "--save",
        other.to_str().unwrap(),
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let r = run(&["report", other.to_str().unwrap(), "--out", rep_s]);
    assert_one_line_error(
        &r,
        &[
            "--out",
            "timeline.svg",
            "not part of a report",
            "move it away",
        ],
        &["name a file inside it"],
        "a folder named timeline.svg",
    );
    for (name, bytes) in names.iter().zip(&before) {
        assert_eq!(
            &std::fs::read(rep.join(name)).unwrap(),
            bytes,
            "{name} was replaced by a report that failed"
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// `--out dangling/rep` said "cannot write there: File exists" and `--out loop` "Not a directory":
/// the link that leads nowhere went unnamed. Now named, with its target and the fix, and nothing
/// is created.
#[test]
fn a_report_through_a_link_that_leads_nowhere_names_the_link() {
    let dir = scratch(SUITE, "report-broken-link");
    let plan = saved_plan(&dir);
    std::os::unix::fs::symlink("missing/place", dir.join("dangling")).unwrap();
    std::os::unix::fs::symlink("loop-b", dir.join("loop-a")).unwrap();
    std::os::unix::fs::symlink("loop-a", dir.join("loop-b")).unwrap();
    for (out, link, target) in [
        ("dangling/rep", "dangling", "missing/place"),
        ("dangling", "dangling", "missing/place"),
        ("loop-a/rep", "loop-a", "loop-b"),
    ] {
        let out = dir.join(out);
        let r = run(&["report", &plan, "--out", out.to_str().unwrap()]);
        assert_one_line_error(
            &r,
            &[
                link,
                &format!("link to {target}"),
                "does not exist",
                "remove the link",
            ],
            &["File exists", "Not a directory"],
            out.to_str().unwrap(),
        );
    }
    assert!(!dir.join("missing").exists(), "a folder was created");
    let _ = std::fs::remove_dir_all(dir);
}

/// A dense Llama-3-8B-shaped launch line on one node, without a parallel size.
const LINE: &str = "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096 --max-position-embeddings 4096 --micro-batch-size 1 --global-batch-size 64 --bf16 --vocab-size 32000";

/// `--tensor-model-parallel-size= 2` (a space after the '=', or the value on the next line) was
/// told "\"2\" follows --tensor-model-parallel-size=, which takes no further value ...; drop it",
/// and dropping the 2 left `--tensor-model-parallel-size=`, refused in turn as an empty value. The
/// fix now joins them, and the joined line runs at tp 2.
#[test]
fn a_value_cut_from_its_equals_sign_is_told_to_join_it() {
    for gap in [" ", "\n", " \\\n "] {
        let line = format!("{LINE} --tensor-model-parallel-size={gap}2");
        let r = run(&["eval", "--nodes", "1", "--megatron-args", &line]);
        assert_one_line_error(
            &r,
            &[
                "\"2\"",
                "--tensor-model-parallel-size=",
                "empty",
                "--tensor-model-parallel-size=2",
            ],
            &["drop it"],
            &format!("{gap:?}"),
        );
    }
    let fixed = format!("{LINE} --tensor-model-parallel-size=2");
    let r = run(&["eval", "--nodes", "1", "--megatron-args", &fixed]);
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    assert!(r.stdout.contains("plan: tp 2 x"), "{}", r.stdout);
}

/// The bundled published-runs file cut to its run `id`, with each `(from, to)` replaced (the first
/// occurrence in the run), written as `dir/name`.
fn published_run_with(
    dir: &std::path::Path,
    name: &str,
    id: &str,
    edits: &[(&str, &str)],
) -> String {
    let text = std::fs::read_to_string(format!("{ROOT}/validation/published_runs.yaml")).unwrap();
    let start = text.find(&format!("- id: {id}\n")).expect("the run");
    let rest = &text[start..];
    let mut run = match rest[1..].find("\n- id: ") {
        Some(end) => rest[..end + 2].to_string(),
        None => rest.to_string(),
    };
    for (from, to) in edits {
        assert!(run.contains(from), "no {from:?} in run {id}");
        run = run.replacen(from, to, 1);
    }
    let path = dir.join(name);
    std::fs::write(&path, run).unwrap();
    path.to_string_lossy().into_owned()
}

/// `accuracy --runs FILE --format json`'s one row.
fn accuracy_row(file: &str) -> serde_json::Value {
    let rows = json(&["accuracy", "--runs", file, "--format", "json"]);
    assert_eq!(rows.as_array().map(Vec::len), Some(1), "{rows}");
    rows[0].clone()
}

/// A run with a stated step time of 10 s beside a derived one of 3.53 s was compared at 10 s, the
/// derived time dropped without a word. Two times more than 1% apart are refused; within 1% (one
/// time rounded twice) the run is compared as before.
#[test]
fn two_published_step_times_that_disagree_are_refused() {
    let dir = scratch(SUITE, "two-step-times");
    const SC21: &str = "megatron-sc21-t1-1.7b";
    let both = published_run_with(
        &dir,
        "both.yaml",
        SC21,
        &[("iteration_time_s: null", "iteration_time_s: 10")],
    );
    let r = run(&["accuracy", "--runs", &both]);
    assert_one_line_error(
        &r,
        &[
            "megatron-sc21-t1-1.7b",
            "results.iteration_time_s 10",
            "derived.iteration_time_s_from_eq3 3.53",
            "one step time",
            "remove the other",
        ],
        &[],
        "10 s beside 3.53 s",
    );
    let close = published_run_with(
        &dir,
        "close.yaml",
        SC21,
        &[("iteration_time_s: null", "iteration_time_s: 3.54")],
    );
    assert_eq!(accuracy_row(&close)["published_step_s"], 3.54);
    let _ = std::fs::remove_dir_all(dir);
}

/// SC'21's 145.6B run: 80 layers at pp 8 (10 a stage), `layers_per_virtual_stage: 5` and
/// `virtual_pipeline_stages: 2`. Without the count, the run was planned at vpp 1; it is now
/// planned at the 10 / 5 = 2 the layers per virtual stage imply, the bundled run's prediction.
/// A count that contradicts them, or layers per virtual stage that do not divide a stage, are
/// refused.
#[test]
fn layers_per_virtual_stage_sets_the_interleaving() {
    let dir = scratch(SUITE, "layers-per-virtual-stage");
    const RUN: &str = "megatron-sc21-t1-145.6b";
    let bundled = published_run_with(&dir, "bundled.yaml", RUN, &[]);
    let bundled = accuracy_row(&bundled);
    assert!(
        bundled["plan"].as_str().unwrap().contains("vpp2"),
        "{bundled}"
    );
    let without_count = published_run_with(
        &dir,
        "lpvs.yaml",
        RUN,
        &[("    virtual_pipeline_stages: 2\n", "")],
    );
    let row = accuracy_row(&without_count);
    assert_eq!(row["plan"], bundled["plan"], "{row}");
    assert_eq!(
        row["predicted_step_s"], bundled["predicted_step_s"],
        "{row}"
    );
    let contradicts = published_run_with(
        &dir,
        "contradicts.yaml",
        RUN,
        &[("virtual_pipeline_stages: 2", "virtual_pipeline_stages: 5")],
    );
    assert_one_line_error(
        &run(&["accuracy", "--runs", &contradicts]),
        &[
            RUN,
            "plan.virtual_pipeline_stages: 5",
            "plan.layers_per_virtual_stage: 5",
            "virtual_pipeline_stages: 2",
        ],
        &["--vpp"],
        "vpp 5 beside 5 layers per virtual stage",
    );
    let undivided = published_run_with(
        &dir,
        "undivided.yaml",
        RUN,
        &[("layers_per_virtual_stage: 5", "layers_per_virtual_stage: 3")],
    );
    assert_one_line_error(
        &run(&["accuracy", "--runs", &undivided]),
        &[
            RUN,
            "plan.layers_per_virtual_stage: 3",
            "10 layers",
            "divisor of 10",
        ],
        &[],
        "3 layers per virtual stage of 10",
    );
    let zero = published_run_with(
        &dir,
        "zero.yaml",
        RUN,
        &[("layers_per_virtual_stage: 5", "layers_per_virtual_stage: 0")],
    );
    assert_one_line_error(
        &run(&["accuracy", "--runs", &zero]),
        &[RUN, "plan.layers_per_virtual_stage: 0", "at least 1"],
        &["does not divide"],
        "0 layers per virtual stage",
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// `plan.precision: fp8` (and fp32) was evaluated at 16 bits without a word, the step time the
/// bundled fp16 run's. Refused; `bf16` and `BF16 (--bf16)` still read.
#[test]
fn a_published_run_at_a_precision_tpsim_does_not_evaluate_is_refused() {
    let dir = scratch(SUITE, "precision");
    const RUN: &str = "megatron-sc21-t1-1.7b";
    const FP16: &str = "precision: fp16 (--fp16, --loss-scale 8192)";
    for (i, precision) in ["fp8", "fp32", "'8-bit'"].into_iter().enumerate() {
        let file = published_run_with(
            &dir,
            &format!("p{i}.yaml"),
            RUN,
            &[(FP16, &format!("precision: {precision}"))],
        );
        assert_one_line_error(
            &run(&["accuracy", "--runs", &file]),
            &[RUN, "plan.precision", "not fp16 or bf16", "precision: bf16"],
            &[],
            precision,
        );
    }
    for (i, precision) in ["bf16", "BF16 (--bf16)"].into_iter().enumerate() {
        let file = published_run_with(
            &dir,
            &format!("ok{i}.yaml"),
            RUN,
            &[(FP16, &format!("precision: {precision}"))],
        );
        assert_eq!(accuracy_row(&file)["id"], RUN);
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// The bundled GB200 NVL72 profile with its `nvlink_domain_gpus: 72` line set to `domain`, written
/// as `dir/name`.
fn gb200_with_domain(dir: &std::path::Path, name: &str, domain: &str) -> String {
    let text = std::fs::read_to_string(format!("{ROOT}/clusters/gb200-nvl72.yaml")).unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with("nvlink_domain_gpus:"))
        .expect("the domain line");
    let path = dir.join(name);
    std::fs::write(
        &path,
        text.replacen(line, &format!("nvlink_domain_gpus: {domain}"), 1),
    )
    .unwrap();
    path.to_string_lossy().into_owned()
}

/// `nvlink_domain_gpus: 4294967292` was accepted and the cluster line said "NVLink in 64-GPU
/// segments of 4294967292-GPU racks". A domain past 576 GPUs is refused; 576 (eight NVL72 racks)
/// still reads.
#[test]
fn an_nvlink_domain_past_the_switch_systems_reach_is_refused() {
    let dir = scratch(SUITE, "nvlink-domain");
    for domain in ["4294967292", "1000000", "580"] {
        let gpu = gb200_with_domain(&dir, &format!("d{domain}.yaml"), domain);
        let r = run(&[
            "eval",
            "--model",
            "llama3-70b",
            "--gpu",
            &gpu,
            "--nodes",
            "32",
            "--global-batch",
            "256",
            "--tp",
            "8",
        ]);
        assert_one_line_error(
            &r,
            &[
                &format!("nvlink_domain_gpus: {domain}"),
                "576",
                "nvlink_domain_gpus: 72",
            ],
            &[],
            domain,
        );
    }
    let gpu = gb200_with_domain(&dir, "d576.yaml", "576");
    let r = run(&[
        "eval",
        "--model",
        "llama3-70b",
        "--gpu",
        &gpu,
        "--nodes",
        "32",
        "--global-batch",
        "256",
        "--tp",
        "8",
    ]);
    assert!(r.code == 0 || r.code == 1, "576: {}", r.stderr);
    let _ = std::fs::remove_dir_all(dir);
}
