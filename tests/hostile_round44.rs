//! Hostile input, round 44: this session's plan-file prices, published-runs keys and wrong kinds
//! of file, then calibrate's message sizes and the NVLink-domain fix:
//! - `compare --plan A --plan B` of two saved plans whose `tokens:` differ (300B against 1T) said
//!   "plan A and plan B are the same plan ... every difference below is zero" above a time to
//!   train of 41.3 against 137.6 days (the budgets, not the plans), and a `tokens:` /
//!   `price_per_gpu_hour:` in one file only dropped the time and cost rows without a word. The
//!   budget and the price are now part of the scenario both plans must share (a flag overrides
//!   both files, and the comparison runs).
//! - a published-runs file's `plan.layers_per_virtual_stage: 5` at `pp: 1` was refused as
//!   "plan.virtual_pipeline_stages: 16 needs pipeline parallelism; use
//!   plan.virtual_pipeline_stages: 1", a key and value the file never gave and a fix that the
//!   layers per virtual stage contradict in turn; it now names the key given, pp and the fix.
//! - a published-runs file's negative `micro_batch_size`, `global_batch_size`,
//!   `virtual_pipeline_stages` or `layers_per_virtual_stage` was told "must be a whole number, 0 or
//!   more (e.g. micro_batch_size: 0)", and 0 is refused next ("must be at least 1").
//! - a plan file's `price_per_gpu_hour:` errors named neither the file nor a fix in its words
//!   ("price_per_gpu_hour: NaN must be ... e.g. --price-per-gpu-hour 2.5"), where the file's
//!   `tokens:` names both; they now say the file and `price_per_gpu_hour: 2.5` (and the flag).
//! - `calibrate --backend cpu --min-message 1GiB` was told "e.g. --max-message 4GiB", which the
//!   CPU backend's 1 GiB limit refuses next; it now says the most --min-message can be.
//! - validation/published_runs.yaml (a list of runs) given to `--plan`, `--model`, `--gpu`,
//!   `--calibration`, `report` or `sweep --axis gpu` was refused as "invalid type: sequence,
//!   expected a mapping of keys", naming neither what the file is nor `tpsim accuracy --runs`,
//!   where every other mix-up of tpsim's inputs is named so.
//! - `--gpus-per-node` past the GPU's NVLink domain was told "count the nodes accordingly (e.g.
//!   twice the --nodes)", right only for a domain of half a node: a calibrated CPU profile's
//!   1-GPU domain under a saved 8-GPU node needs 8 nodes, and it read "the 1 GPUs". The fix now
//!   gives the node count that keeps the GPUs.
//!
//! Every error case checks exit 2, one line on stderr and the words that name the value, the rule
//! and the fix; every fix offered is run.
//!
//! Looked at and found sound: `price_per_gpu_hour:` as text, `.nan`, `.inf`, 0, negative, 1e5,
//! null, hex, a list, `1_000`, `$2.50`, without `tokens:`, beside `--price-per-gpu-hour` and
//! `--tokens` (the flags win); `layers_per_virtual_stage` of 1, 10, 80, -5, 2.5, '5', 1e11 and null,
//! beside `virtual_pipeline_stages: 0` and `pp: 0`; hard links and files named like the report's
//! inside `report --out`, `--out ''`, `--out` a file; NaN/-Infinity in nested lists, inside objects
//! in lists, after keys with escaped quotes, unicode keys, strings holding `]` and `,`, and a bare
//! `[NaN]`; `--megatron-args ... --optimizer muon` (and `dist_muon`) under every --framework with
//! `--use-distributed-optimizer`, `--zero-stage 1`, `--optimizer-cpu-offload`, `--use-torch-fsdp2`,
//! `--use-megatron-fsdp` and interleaving; calibrate's --ranks 0/1/65/-1, --warmup 1001, --reps
//! 0/1001, --tp 0/3/16/1,1/'', --sweep 0/''/32,,64/1e9/32.5, --min-message 0/-1/'', --copy-bytes
//! 0/1PiB; validate's --top 0/1000, --tp 0/3/8, --ranks below --tp, --sequence-parallel at --tp 1;
//! plan files, model files, GPU profiles, calibrated profiles and current-stack runs files given to
//! each other's flags; `plan --top` 0/-1/1e11, `--save` ''/a directory/the --hf-config file,
//! `sweep --chart` over a --values profile or the --hf-config file, `--emit bogus`, `--threads 0`.

mod common;

use common::*;

const SUITE: &str = "hostile44";

/// The best plan of Llama 3 8B on one H100 node saved as `dir/name`, with `extra` lines added
/// before its `plan:` mapping; returns its path.
fn saved_plan(dir: &std::path::Path, name: &str, extra: &str) -> String {
    let base = dir.join("base.yaml");
    if !base.exists() {
        let r = run(&[
            "plan",
            "--model",
            "llama3-8b",
            "--nodes",
            "1",
            "--save",
            base.to_str().unwrap(),
        ]);
        assert_eq!(r.code, 0, "{}", r.stderr);
    }
    let text = std::fs::read_to_string(&base).unwrap();
    assert!(text.contains("\nplan:\n"), "{text}");
    let path = dir.join(name);
    std::fs::write(
        &path,
        text.replacen("\nplan:\n", &format!("\n{extra}plan:\n"), 1),
    )
    .unwrap();
    path.to_string_lossy().into_owned()
}

#[test]
fn compare_refuses_plan_files_of_two_token_budgets_or_prices() {
    let dir = scratch(SUITE, "compare-budgets");
    let a = saved_plan(&dir, "a.yaml", "tokens: 300B\nprice_per_gpu_hour: 2.5\n");
    let b = saved_plan(&dir, "b.yaml", "tokens: 1T\nprice_per_gpu_hour: 2.5\n");
    let plain = saved_plan(&dir, "plain.yaml", "");
    assert_one_line_error(
        &run(&["compare", "--plan", &a, "--plan", &b]),
        &[
            "token budget: 300.0B against 1.00T",
            "--tokens",
            "give the value as a flag",
        ],
        &[],
        "300B against 1T",
    );
    assert_one_line_error(
        &run(&["compare", "--plan", &a, "--plan", &plain]),
        &[
            "token budget: 300.0B against none",
            "price per GPU-hour: $2.5 against none",
            "--price-per-gpu-hour",
        ],
        &[],
        "a budget in one file only",
    );
    // The fixes offered run, and the rows then compare the plans alone.
    let r = run(&["compare", "--plan", &a, "--plan", &b, "--tokens", "1T"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let row = r
        .stdout
        .lines()
        .find(|l| l.contains("time to train"))
        .expect("a time-to-train row");
    assert!(row.trim_end().ends_with("0.0 │"), "{row}");
    let r = run(&[
        "compare",
        "--plan",
        &a,
        "--plan",
        &plain,
        "--tokens",
        "300B",
        "--price-per-gpu-hour",
        "2.5",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("cost to train"), "{}", r.stdout);
    let _ = std::fs::remove_dir_all(dir);
}

/// SC'21's 145.6B run from validation/published_runs.yaml with `edits` applied, as `dir/name`.
fn published_run_with(dir: &std::path::Path, name: &str, edits: &[(&str, &str)]) -> String {
    let text = std::fs::read_to_string(format!("{ROOT}/validation/published_runs.yaml")).unwrap();
    let start = text
        .find("- id: megatron-sc21-t1-145.6b\n")
        .expect("the run");
    let rest = &text[start..];
    let mut run = match rest[1..].find("\n- id: ") {
        Some(end) => rest[..end + 2].to_string(),
        None => rest.to_string(),
    };
    for (from, to) in edits {
        assert!(run.contains(from), "no {from:?} in the run");
        run = run.replacen(from, to, 1);
    }
    let path = dir.join(name);
    std::fs::write(&path, run).unwrap();
    path.to_string_lossy().into_owned()
}

#[test]
fn layers_per_virtual_stage_without_a_pipeline_is_told_in_the_files_keys() {
    let dir = scratch(SUITE, "lpvs-pp1");
    let no_pipeline = [
        ("    pp: 8\n", "    pp: 1\n"),
        ("dp: 24", "dp: 192"),
        ("    virtual_pipeline_stages: 2\n", ""),
    ];
    let file = published_run_with(&dir, "pp1.yaml", &no_pipeline);
    assert_one_line_error(
        &run(&["accuracy", "--runs", &file]),
        &[
            "megatron-sc21-t1-145.6b",
            "plan.layers_per_virtual_stage: 5",
            "plan.pp is 1",
            "null for plan.layers_per_virtual_stage",
        ],
        &["virtual_pipeline_stages: 16", "virtual_pipeline_stages: 1"],
        "5 layers per virtual stage at pp 1",
    );
    // The fix offered runs.
    let mut fixed = no_pipeline.to_vec();
    fixed.push((
        "layers_per_virtual_stage: 5",
        "layers_per_virtual_stage: null",
    ));
    let file = published_run_with(&dir, "fixed.yaml", &fixed);
    let r = run(&["accuracy", "--runs", &file, "--format", "json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("tp8 pp1 dp192 vpp1"), "{}", r.stdout);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn negative_published_run_counts_are_not_told_to_be_zero() {
    let dir = scratch(SUITE, "negative-counts");
    for (i, (from, to, key)) in [
        (
            "micro_batch_size: 2",
            "micro_batch_size: -2",
            "micro_batch_size",
        ),
        (
            "global_batch_size: 2304",
            "global_batch_size: -1",
            "global_batch_size",
        ),
        (
            "virtual_pipeline_stages: 2",
            "virtual_pipeline_stages: -1",
            "virtual_pipeline_stages",
        ),
        (
            "layers_per_virtual_stage: 5",
            "layers_per_virtual_stage: -5",
            "layers_per_virtual_stage",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let file = published_run_with(&dir, &format!("n{i}.yaml"), &[(from, to)]);
        assert_one_line_error(
            &run(&["accuracy", "--runs", &file]),
            &[&format!("{key}: -"), "1 or more", &format!("{key}: 1")],
            &[&format!("{key}: 0")],
            key,
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_plan_files_price_is_refused_in_the_files_words() {
    let dir = scratch(SUITE, "file-price");
    let nan = saved_plan(&dir, "nan.yaml", "tokens: 300B\nprice_per_gpu_hour: .nan\n");
    assert_one_line_error(
        &run(&["eval", "--plan", &nan]),
        &[
            "nan.yaml: price_per_gpu_hour: NaN",
            "positive",
            "price_per_gpu_hour: 2.5",
        ],
        &[],
        "NaN price in a plan file",
    );
    let no_tokens = saved_plan(&dir, "no-tokens.yaml", "price_per_gpu_hour: 2.5\n");
    assert_one_line_error(
        &run(&["eval", "--plan", &no_tokens]),
        &[
            "no-tokens.yaml: price_per_gpu_hour:",
            "needs",
            "tokens: 300B",
        ],
        &[],
        "a plan file's price without tokens",
    );
    // The fix offered in the file's words runs.
    let fixed = saved_plan(
        &dir,
        "fixed.yaml",
        "tokens: 300B\nprice_per_gpu_hour: 2.5\n",
    );
    let r = run(&["eval", "--plan", &fixed]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("at $2.5 per GPU-hour"), "{}", r.stdout);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn calibrate_on_cpu_does_not_offer_a_max_message_past_its_limit() {
    let dir = scratch(SUITE, "min-message");
    let out = dir.join("cal.yaml");
    let calibrate = |extra: &[&str]| {
        let mut args = vec![
            "calibrate",
            "--backend",
            "cpu",
            "--layers",
            "2",
            "--hidden",
            "256",
            "--heads",
            "4",
            "--seq-len",
            "64",
            "--ranks",
            "2",
            "--reps",
            "1",
            "--warmup",
            "0",
            "--tp",
            "1",
            "--sweep",
            "32,64",
            "-o",
        ];
        args.push(out.to_str().unwrap());
        args.extend_from_slice(extra);
        run(&args)
    };
    assert_one_line_error(
        &calibrate(&["--min-message", "1GiB"]),
        &[
            "--min-message 1GiB",
            "limit of 1GiB",
            "--min-message 256MiB",
        ],
        &["--max-message 4GiB"],
        "--min-message 1GiB on the CPU backend",
    );
    // The most it names runs, with a --max-message the limit allows.
    let r = calibrate(&["--min-message", "256MiB", "--max-message", "1GiB"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_published_runs_file_given_as_another_input_is_named() {
    let dir = scratch(SUITE, "runs-as-other");
    let runs = format!("{ROOT}/validation/published_runs.yaml");
    let out = dir.join("rep");
    for (args, wanted) in [
        (vec!["eval", "--plan", &runs], "not a plan file"),
        (
            vec!["eval", "--model", &runs, "--nodes", "1"],
            "not a model file",
        ),
        (
            vec![
                "eval",
                "--gpu",
                &runs,
                "--model",
                "llama3-8b",
                "--nodes",
                "1",
                "--tp",
                "8",
            ],
            "not a GPU profile",
        ),
        (
            vec![
                "plan",
                "--calibration",
                &runs,
                "--model",
                "llama3-8b",
                "--nodes",
                "1",
            ],
            "not a GPU profile",
        ),
        (
            vec!["report", &runs, "--out", out.to_str().unwrap()],
            "not a plan file",
        ),
    ] {
        assert_one_line_error(
            &run(&args),
            &["a published-runs file", wanted, "tpsim accuracy --runs"],
            &["expected a mapping"],
            &args.join(" "),
        );
    }
    assert!(!out.exists(), "report wrote {}", out.display());
    // The command it names reads the file.
    let r = run(&["accuracy", "--runs", &runs, "--format", "json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn gpus_per_node_past_the_nvlink_domain_names_the_nodes_that_keep_the_gpus() {
    let dir = scratch(SUITE, "nvlink-domain");
    // A profile whose NVLink domain is one GPU: the bundled H100's with nvlink_domain_gpus: 1.
    let h100 = std::fs::read_to_string(format!("{ROOT}/clusters/h100-sxm-80g.yaml")).unwrap();
    let one = dir.join("one-gpu.yaml");
    assert!(h100.contains("\ngpus_per_node: 8\n"), "{h100}");
    std::fs::write(
        &one,
        h100.replacen("\ngpus_per_node: 8\n", "\ngpus_per_node: 1\n", 1),
    )
    .unwrap();
    let one = one.to_str().unwrap();
    let r = run(&[
        "eval",
        "--model",
        "llama3-8b",
        "--gpu",
        one,
        "--nodes",
        "2",
        "--gpus-per-node",
        "4",
        "--tp",
        "1",
    ]);
    assert_one_line_error(
        &r,
        &[
            "--gpus-per-node 4",
            "1 GPU ",
            "--gpus-per-node 1 and --nodes 8",
        ],
        &["twice", "1 GPUs"],
        "4 GPUs a node on a 1-GPU domain",
    );
    // The fix offered runs (exit 1: Llama 3 8B does not fit one GPU unsharded).
    let fixed = json(&[
        "eval",
        "--model",
        "llama3-8b",
        "--gpu",
        one,
        "--nodes",
        "8",
        "--gpus-per-node",
        "1",
        "--tp",
        "1",
        "--format",
        "json",
    ]);
    assert!(
        fixed["plans"][0]["time"]["step_s"]
            .as_f64()
            .is_some_and(|s| s > 0.0),
        "{fixed}"
    );
    let _ = std::fs::remove_dir_all(dir);
}
