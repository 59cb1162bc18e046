//! Leftovers of the eighteenth session's hostile round (reported, in files the round did not
//! edit): refusals that named no flag the user typed or values the user never gave, fixes left
//! out, a uneven split described as another, a help example that did not run, and a sweep's CSV
//! and JSON carrying different settings.

mod common;

use common::*;

/// The Megatron-LM line `--emit megatron` writes for Nemotron 3 Nano on two nodes at ep 8.
fn nano_line() -> String {
    let r = run(&[
        "eval",
        "--model",
        "nemotron-3-nano-30b-a3b",
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        "2",
        "--ep",
        "8",
        "--emit",
        "megatron",
    ]);
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    let line = r.stdout.trim().to_string();
    assert!(line.contains("--mamba-num-heads 64"), "{line}");
    line
}

fn eval_line(line: &str) -> Run {
    run(&[
        "eval",
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        "2",
        "--megatron-args",
        line,
    ])
}

#[test]
fn a_window_on_a_hybrid_stack_is_named_as_given() {
    let r = run(&[
        "eval",
        "--model",
        "nemotron-3-nano-30b-a3b",
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        "2",
        "--attention-window",
        "128",
        "--ep",
        "8",
    ]);
    assert_one_line_error(
        &r,
        &[
            "hybrid Mamba-Transformer stack with a sliding attention window",
            "--attention-window 128",
            "drop --attention-window",
        ],
        &["drop it"],
        "--attention-window on a hybrid stack",
    );
    // A model file names its key.
    let dir = scratch("leftovers18", "window-file");
    let file = std::fs::read_to_string(format!("{ROOT}/models/nemotron-h-8b.yaml")).unwrap();
    std::fs::write(
        dir.join("windowed.yaml"),
        format!("{file}attention_window:\n  tokens: 128\n"),
    )
    .unwrap();
    let r = run_in(
        &dir,
        &[
            "eval",
            "--model",
            "windowed.yaml",
            "--nodes",
            "1",
            "--gpu",
            "h100-sxm-80g",
        ],
    );
    assert_one_line_error(
        &r,
        &["attention_window.tokens: 128", "drop attention_window"],
        &["--attention-window"],
        "a model file's window on a hybrid stack",
    );
    // A launch line names its --window-size.
    let line = nano_line().replace(
        "--hidden-size 2688",
        "--hidden-size 2688 --window-size \"(127,0)\"",
    );
    assert_one_line_error(
        &eval_line(&line),
        &["--window-size \"(127,0)\"", "drop --window-size"],
        &["--attention-window"],
        "--window-size on a hybrid launch line",
    );
}

#[test]
fn mamba_shape_errors_of_a_launch_line_speak_in_its_flags() {
    // The heads derived from the head width: 2 x 2688 / 5376 = 1 head, which 8 groups do not
    // divide; the error said "hybrid mamba_heads 1", a key and a value the line never gave.
    let line = nano_line()
        .replace("--mamba-num-heads 64 ", "")
        .replace("--mamba-head-dim 64", "--mamba-head-dim 5376");
    assert_one_line_error(
        &eval_line(&line),
        &[
            "--mamba-head-dim 5376 without --mamba-num-heads",
            "--mamba-num-groups 8",
            "2 x --hidden-size 2688 / head width 5376 = 1 heads",
            "nheads % ngroups == 0",
            "give --mamba-num-heads as a multiple of 8",
        ],
        &["mamba_heads", "mamba_groups"],
        "a head width leaving one head",
    );
    let line = nano_line().replace("--mamba-num-heads 64", "--mamba-num-heads 12");
    assert_one_line_error(
        &eval_line(&line),
        &[
            "--mamba-num-heads 12, --mamba-num-groups 8",
            "e.g. 16",
            "--mamba-num-groups dividing 12 (e.g. 6)",
        ],
        &["mamba_heads", "mamba_groups"],
        "heads not a multiple of the groups",
    );
    let line = nano_line().replace("--mamba-state-dim 128", "--mamba-state-dim 100000");
    assert_one_line_error(
        &eval_line(&line),
        &[
            "--mamba-state-dim 100000",
            "1 to 65536",
            "give the model's value",
        ],
        &["mamba_state_dim"],
        "a state width past the typo guard",
    );
}

#[test]
fn a_first_stage_count_past_the_layers_and_a_deep_mtp_get_a_fix() {
    // Nemotron 3 Super has 88 layers: the error named no valid count.
    let r = run(&[
        "eval",
        "--model",
        "nemotron-3-super-120b-a12b",
        "--nodes",
        "32",
        "--pp",
        "8",
        "--decoder-first-pipeline-num-layers",
        "100",
    ]);
    assert_one_line_error(
        &r,
        &[
            "--decoder-first-pipeline-num-layers 100 leaves too few of the 88 layers",
            "give at most 81",
            "e.g. --decoder-first-pipeline-num-layers 11",
        ],
        &[],
        "a first stage of 100 of 88 layers",
    );
    // The example splits: 11 + 7 x 11.
    let r = run(&[
        "eval",
        "--model",
        "nemotron-3-super-120b-a12b",
        "--nodes",
        "32",
        "--pp",
        "8",
        "--decoder-first-pipeline-num-layers",
        "11",
    ]);
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    let r = run(&[
        "eval",
        "--model",
        "deepseek-v3",
        "--nodes",
        "32",
        "--mtp-layers",
        "100",
    ]);
    assert_one_line_error(
        &r,
        &[
            "--mtp-layers 100 is larger than 16",
            "give at most 16, e.g. --mtp-layers 1 (DeepSeek-V3), or 0 for none",
        ],
        &["check the value"],
        "--mtp-layers 100",
    );
}

#[test]
fn a_latent_width_wider_than_the_hidden_is_refused() {
    // LatentMoE projects h -> latent before the experts (Nemotron 3 Super: 4096 -> 1024); a
    // latent of 4096 on a hidden of 2688 was accepted and priced.
    let dir = scratch("leftovers18", "latent");
    let r = eval_hf(
        &dir,
        "wide.json",
        &nemotron_h_moe_config(r#", "moe_latent_size": 4096"#),
    );
    assert_one_line_error(
        &r,
        &[
            "key \"moe_latent_size\" 4096 is wider than \"hidden_size\" 2688",
            "give a latent width below 2688",
        ],
        &[],
        "moe_latent_size 4096 over hidden_size 2688",
    );
    let r = eval_hf(
        &dir,
        "narrow.json",
        &nemotron_h_moe_config(r#", "moe_latent_size": 1024"#),
    );
    assert_eq!(hf_model(&r)["moe"]["latent_size"], 1024);
    // A model file names its keys.
    let file = std::fs::read_to_string(format!("{ROOT}/models/nemotron-3-super-120b-a12b.yaml"))
        .unwrap()
        .replace("  latent_size: 1024 ", "  latent_size: 8192 ");
    std::fs::write(dir.join("super.yaml"), file).unwrap();
    let r = run_in(&dir, &["eval", "--model", "super.yaml", "--nodes", "8"]);
    assert_one_line_error(
        &r,
        &[
            "moe.latent_size: 8192 is wider than hidden: 4096",
            "e.g. moe.latent_size: 1024",
        ],
        &["--moe-latent-size"],
        "a model file's latent_size 8192",
    );
}

#[test]
fn compare_help_examples_with_the_bundled_plans_run_as_written() {
    // The example compared plans/seed-512b-32nodes.yaml with plans/best.yaml, which the
    // repository does not ship (it ships plans/best-512b-32nodes.yaml).
    let help = run(&["compare", "--help"]);
    assert_eq!(help.code, 0, "{}", help.stderr);
    assert!(!help.stdout.contains("plans/best.yaml"), "{}", help.stdout);
    // The help wraps lines: read it as one run of words.
    let words: Vec<&str> = help.stdout.split_whitespace().collect();
    let at = words
        .windows(3)
        .position(|w| w[0] == "compare" && w[1] == "--plan" && w[2].starts_with("plans/seed-"))
        .unwrap_or_else(|| panic!("{}", help.stdout));
    let end = words[at..]
        .iter()
        .position(|w| *w == "json")
        .unwrap_or_else(|| panic!("{}", help.stdout));
    let args = &words[at..=at + end];
    assert_eq!(
        args.join(" "),
        "compare --plan plans/seed-512b-32nodes.yaml --plan plans/best-512b-32nodes.yaml --format json"
    );
    let r = run(args);
    assert_eq!(r.code, 0, "{args:?}: {}", r.stderr);
    assert!(r.stdout.contains("\"terms\""), "{}", r.stdout);
}

#[test]
fn the_sweep_csv_and_json_carry_the_same_settings() {
    // The CSV had pp_schedule and cpu_offload_layers but no kernel_fusion or local_batch; the
    // JSON the reverse (it left out a 1F1B schedule and a row's zero offloaded layers).
    let args = |format: &str| {
        vec![
            "sweep",
            "--model",
            "llama3-70b",
            "--framework",
            "torchtitan",
            "--local-batch",
            "8",
            "--axis",
            "nodes",
            "--values",
            "4",
            "--global-batch",
            "64",
            "--format",
            format.to_string().leak(),
        ]
    };
    let v = json(&args("json"));
    assert_eq!(v["kernel_fusion"], "eager", "{v}");
    assert_eq!(v["local_batch"], 8, "{v}");
    assert_eq!(v["pp_schedule"], "1f1b", "{v}");
    assert_eq!(v["rows"][0]["cpu_offload_layers"], 0, "{v}");
    let r = run(&args("csv"));
    assert_eq!(r.code, 0, "{}", r.stderr);
    let mut lines = r.stdout.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let row: Vec<String> = csv_cells(lines.next().unwrap());
    assert_eq!(header.len(), row.len());
    let cell = |name: &str| {
        let at = header
            .iter()
            .position(|h| *h == name)
            .unwrap_or_else(|| panic!("no {name} column: {header:?}"));
        row[at].as_str()
    };
    assert_eq!(cell("kernel_fusion"), "eager");
    assert_eq!(cell("local_batch"), "8");
    assert_eq!(cell("pp_schedule"), "1f1b");
    assert_eq!(cell("cpu_offload_layers"), "0");
}

#[test]
fn tpsims_own_first_last_split_shows_as_one_and_eval_says_what_it_writes() {
    // DeepSeek-V3's 61 layers on 16 stages: tpsim's own split, 2/4x14/3, is written as
    // --decoder-first/last-pipeline-num-layers 2 and 3 (63 units do not split over 16 stages, so
    // not as Megatron-LM's --account-for-* switches); the table had no layers column, the "why"
    // no layers line, and eval called it "embedding and output layer count as one layer each".
    let plan = [
        "plan",
        "--model",
        "deepseek-v3",
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        "256",
        "--global-batch",
        "4096",
        "--allow-uneven-pp",
        "--top",
        "1",
    ];
    let r = run(&plan);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("┆ layers ┆"), "{}", r.stdout);
    let row = r
        .stdout
        .lines()
        .find(|l| l.starts_with("│ 1 "))
        .unwrap_or_else(|| panic!("{}", r.stdout));
    assert!(row.contains("┆  2/4/3 ┆"), "{row}");
    assert!(
        r.stdout.contains(
            "layers per stage: first 2, middle 4, last 3 — tpsim's own split, weighing the embedding and the output layer as one layer each (--decoder-first-pipeline-num-layers 2 --decoder-last-pipeline-num-layers 3)"
        ),
        "{}",
        r.stdout
    );
    let step = |out: &str| {
        out.lines()
            .find(|l| l.starts_with("time per step:"))
            .unwrap_or_else(|| panic!("{out}"))
            .to_string()
    };
    let mut eval = vec![
        "eval",
        "--model",
        "deepseek-v3",
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        "256",
        "--global-batch",
        "4096",
        "--allow-uneven-pp",
        "--tp",
        "2",
        "--cp",
        "1",
        "--pp",
        "16",
        "--ep",
        "8",
        "--etp",
        "1",
        "--micro-batch",
        "1",
        "--recompute",
        "selective",
        "--zero",
        "1",
        "--sequence-parallel",
    ];
    let own = run(&eval);
    assert!(own.code == 0 || own.code == 1, "{}", own.stderr);
    assert!(
        own.stdout.contains("layers per stage: first 2, middle 4, last 3 (uneven split: first and last stage set as --decoder-first/last-pipeline-num-layers would"),
        "{}",
        own.stdout
    );
    assert!(
        !own.stdout
            .contains("embedding and output layer count as one layer each"),
        "{}",
        own.stdout
    );
    // The same split given as the launch line writes it: the same step.
    eval.extend([
        "--decoder-first-pipeline-num-layers",
        "2",
        "--decoder-last-pipeline-num-layers",
        "3",
    ]);
    let given = run(&eval);
    assert!(given.code == 0 || given.code == 1, "{}", given.stderr);
    assert_eq!(step(&own.stdout), step(&given.stdout));
    // Llama 3 405B's 126 layers on 16 stages: 128 units split evenly, Megatron-LM's
    // --account-for-embedding/loss-in-pipeline-split, as before.
    let r = run(&[
        "eval",
        "--model",
        "llama3-405b",
        "--nodes",
        "64",
        "--tp",
        "8",
        "--pp",
        "16",
        "--global-batch",
        "64",
        "--allow-uneven-pp",
    ]);
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    assert!(
        r.stdout.contains(
            "first 7, middle 8, last 7 (uneven split: embedding and output layer count as one layer each)"
        ),
        "{}",
        r.stdout
    );
}
