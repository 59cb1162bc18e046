//! Regressions from the sixth review of valid usage by a new user: an ML infrastructure engineer
//! who copies a `plan` row into `eval`, compares the top plans of a mixture-of-experts search,
//! checks the README's worked numbers against the commands it names, reads `--help`, and mistypes
//! a bundled name (each test names the finding it guards).

mod common;
use common::{json, run, run_in, scratch};
use serde_json::Value;

fn readme() -> String {
    std::fs::read_to_string(format!("{}/README.md", common::ROOT)).unwrap()
}

/// The README with its line breaks and runs of spaces read as one space.
fn readme_flat() -> String {
    readme().split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The number right after `before` in `text`.
fn number_after(text: &str, before: &str) -> f64 {
    let at = text
        .find(before)
        .unwrap_or_else(|| panic!("no {before:?} in the text"))
        + before.len();
    let digits: String = text[at..]
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    digits
        .parse()
        .unwrap_or_else(|e| panic!("{before:?} is followed by {digits:?}: {e}"))
}

const LLAMA_70B_64_H100: [&str; 8] = [
    "--model",
    "llama3-70b",
    "--nodes",
    "8",
    "--global-batch",
    "512",
    "--seq-len",
    "8192",
];

/// The best plan of `plan --top 1 --format json` over `scenario`.
fn best_row(scenario: &[&str]) -> Value {
    let mut args = vec!["plan", "--top", "1", "--format", "json"];
    args.extend(scenario);
    json(&args)["plans"][0].clone()
}

/// `eval` of a plan row given with its tp, pp, vpp, mb and zero columns but not its `sp yes` took
/// sequence parallelism off (Megatron-LM's default) without a word: Llama 3 70B on 64 H100s came
/// out at 162.5 GiB, "DOES NOT FIT", where the row said 78.0 GiB. stderr now names each default
/// that differs from what `plan` searched, and the column that shows it; given, eval agrees with
/// the row.
#[test]
fn eval_names_the_defaults_a_plan_row_was_not_ranked_with() {
    let row = best_row(&LLAMA_70B_64_H100);
    assert_eq!(row["sequence_parallel"], true, "{row}");
    let (tp, pp, vpp, mb, zero) = (
        row["tp"].to_string(),
        row["pp"].to_string(),
        row["vpp"].to_string(),
        row["micro_batch"].to_string(),
        row["zero"].to_string(),
    );
    let mut args = vec!["eval"];
    args.extend(LLAMA_70B_64_H100);
    args.extend([
        "--tp",
        &tp,
        "--pp",
        &pp,
        "--vpp",
        &vpp,
        "--micro-batch",
        &mb,
        "--zero",
        &zero,
    ]);
    let r = run(&args);
    let note = r
        .stderr
        .lines()
        .find(|l| l.starts_with("note: not given, so eval took Megatron-LM's defaults: "))
        .unwrap_or_else(|| panic!("no note on the defaults taken:\n{}", r.stderr));
    assert!(
        note.contains("sequence parallel off (--sequence-parallel)"),
        "{note}"
    );
    // A plan that does not fit names the recompute it defaulted too (leftovers round 32).
    let columns = if r.code == 0 {
        "its sp column"
    } else {
        "its sp and recomp columns"
    };
    assert!(note.contains(columns), "{note}");
    // --zero was given, and a dense model has no experts: neither is named.
    assert!(!note.contains("ZeRO-0") && !note.contains("etp"), "{note}");

    // Given as the row shows it: no note, and eval's step is the row's.
    args.extend(["--sequence-parallel", "--format", "json"]);
    let r = run(&args);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        !r.stderr.contains("not given, so eval took"),
        "{}",
        r.stderr
    );
    let evaluated: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(
        evaluated["plans"][0]["time"]["step_s"], row["time"]["step_s"],
        "eval of the row's own columns"
    );
}

/// The same for a mixture-of-experts row: `eval --etp` defaults to tp (Megatron-Core's rule), so
/// DeepSeek-V3 on 256 GB200 given the row's tp 2, ep 64 but not its etp 1 ran expert TP 2, its
/// expert groups spanning two NVLink segments: 17.5 s per step where the row said 7.5, with
/// nothing said. ZeRO-0 (no --zero) is named too.
#[test]
fn eval_names_expert_tp_taken_from_tp() {
    let scenario = [
        "--model",
        "deepseek-v3",
        "--gpu",
        "gb200-nvl72",
        "--nodes",
        "64",
        "--global-batch",
        "2048",
        "--tp",
        "2",
        "--ep",
        "64",
        "--micro-batch",
        "4",
        "--sequence-parallel",
        "--recompute",
        "selective",
    ];
    let mut args = vec!["eval"];
    args.extend(scenario);
    let r = run(&args);
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    let note = r
        .stderr
        .lines()
        .find(|l| l.starts_with("note: not given, so eval took"))
        .unwrap_or_else(|| panic!("no note on the defaults taken:\n{}", r.stderr));
    assert!(
        note.contains("expert tensor parallelism 2 as tp (--etp)"),
        "{note}"
    );
    assert!(note.contains("ZeRO-0 (--zero)"), "{note}");
    assert!(note.contains("its zero and etp columns"), "{note}");
    // --sequence-parallel was given: not named.
    assert!(!note.contains("sequence parallel off"), "{note}");
    assert!(
        r.stdout.contains("experts: ep 64 x etp 2"),
        "the plan line says what was taken: {}",
        r.stdout
    );
}

/// A pasted Megatron-LM launch line states its own settings (an absent flag is off there, as in
/// Megatron-LM): the note is for tpsim's own plan flags only.
#[test]
fn a_pasted_launch_line_gets_no_defaults_note() {
    let r = run(&[
        "eval",
        "--nodes",
        "16",
        "--megatron-args",
        "@examples/megatron/llama3-70b.sh",
    ]);
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    assert!(
        !r.stderr.contains("not given, so eval took"),
        "{}",
        r.stderr
    );
}

/// `compare` of DeepSeek-V3's two best plans on 256 GB200 said "EP comm 1.2 points more (ep 64
/// etp 1 in both)": the same degrees, no cause. The two differ in micro-batches per step, and
/// each all-to-all pays a latency per peer; ZeRO-3's per-micro-batch gathers and reductions
/// (22 points between micro-batch 4 and 2) had no cause at all. Each is now named.
#[test]
fn compare_names_micro_batch_counts_behind_ep_and_zero3_terms() {
    let dir = scratch("newuser6", "compare-m");
    let scenario = [
        "--model",
        "deepseek-v3",
        "--gpu",
        "gb200-nvl72",
        "--nodes",
        "64",
        "--global-batch",
        "2048",
        "--tp",
        "2",
        "--ep",
        "64",
        "--etp",
        "1",
        "--zero",
        "3",
        "--recompute",
        "selective",
        "--sequence-parallel",
    ];
    for (mb, file) in [("4", "a.yaml"), ("2", "b.yaml")] {
        let mut args = vec!["plan", "--micro-batch", mb, "--save", file];
        args.extend(scenario);
        let r = run_in(&dir, &args);
        assert_eq!(r.code, 0, "{}", r.stderr);
    }
    let r = run_in(
        &dir,
        &[
            "compare", "--plan", "a.yaml", "--plan", "b.yaml", "--format", "json",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let c: Value = serde_json::from_str(&r.stdout).unwrap();
    let verdict = c["verdict"].as_str().unwrap();
    assert!(
        verdict.contains(
            "DP parameter gathers 22 points less (ZeRO-3 gathers the weights every micro-batch: 4 against 8 micro-batches)"
        ),
        "{verdict}"
    );
    assert!(
        verdict.contains(
            "(ZeRO-3 reduce-scatters the gradients every micro-batch: 4 against 8 micro-batches)"
        ),
        "{verdict}"
    );
    assert!(
        verdict.contains(
            "(ep 64 etp 1 in both; all-to-alls in 4 against 8 micro-batches: one latency per peer each)"
        ),
        "{verdict}"
    );
    // Each named term has its cause: no bare "N points less," left.
    for part in verdict.split(": ").nth(1).unwrap().split("), ") {
        assert!(
            part.contains('('),
            "a term without its cause: {part:?} in {verdict}"
        );
    }
}

/// The README's "A run in no validation file" said `plan` finds 430.5 and 404.7 TFLOP/s per GPU
/// for Llama 3 405B on 8,192 and 16,384 H100s; the commands it names print 431.5 and 407.5 (and
/// the table prints no TFLOP/s at all: the README now says where the number is).
#[test]
fn readme_llama3_405b_tflops_are_what_plan_prints() {
    let text = readme_flat();
    let sentence_at = text
        .find("**A run in no validation file.**")
        .expect("the README section");
    let sentence = &text[sentence_at..];
    assert!(
        sentence.contains("`model_tflops_per_gpu` in its `--format json`"),
        "the README says where the number is: {sentence:.600}"
    );
    let first = number_after(sentence, "(and `--nodes 2048 --dp 128`) finds ");
    let second = number_after(sentence, &format!("finds {first:.1} and "));
    for (nodes, dp, stated) in [("1024", "64", first), ("2048", "128", second)] {
        let best = best_row(&[
            "--model",
            "llama3-405b",
            "--nodes",
            nodes,
            "--seq-len",
            "8192",
            "--global-batch",
            "2048",
            "--tp",
            "8",
            "--pp",
            "16",
            "--dp",
            dp,
            "--allow-uneven-pp",
        ]);
        let printed = best["model_tflops_per_gpu"].as_f64().unwrap();
        assert_eq!(
            format!("{printed:.1}"),
            format!("{stated:.1}"),
            "{nodes} nodes: the README says {stated}, plan prints {printed}"
        );
    }
}

/// The README named `accuracy --run mbridge-25.11-...-deepseek_v3-b200-...` as "tpsim 10.23 s";
/// the command prints 10.37 s.
#[test]
fn readme_accuracy_run_example_is_what_it_prints() {
    let text = readme_flat();
    let run_id = "mbridge-25.11-pretrain-deepseek_v3-b200-256g-mxfp8-gbs2048";
    let at = text
        .find(&format!("{run_id}` (published"))
        .expect("the README's --run example");
    let stated = number_after(&text[at..], ", tpsim ");
    let r = run(&[
        "accuracy",
        "--runs",
        "validation/modern_runs.yaml",
        "--run",
        run_id,
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let first = r.stdout.lines().next().unwrap();
    assert!(
        first.contains(&format!(", {stated:.2} s (")),
        "the README says tpsim {stated:.2} s; the run prints: {first}"
    );
}

/// The README's Compare paragraph said "+91.80 GB per GPU per step" of PP traffic where the table
/// above it prints +91.81 (its difference column subtracts the values as printed, 107.11 − 15.30,
/// so the row reads as a subtraction).
#[test]
fn readme_compare_paragraph_matches_its_table() {
    let text = readme_flat();
    let stated = number_after(&text, "for more PP traffic (+");
    let c = json(&[
        "compare",
        "--plan",
        "plans/seed-512b-32nodes.yaml",
        "--plan",
        "plans/best-512b-32nodes.yaml",
        "--format",
        "json",
    ]);
    let printed = |p: &Value| {
        let gb = p["comm"]["pp"]["wire_bytes"].as_f64().unwrap() / 1e9;
        format!("{gb:.2}").parse::<f64>().unwrap()
    };
    let gap = printed(&c["b"]) - printed(&c["a"]);
    assert_eq!(
        format!("{stated:.2}"),
        format!("{gap:.2}"),
        "README +{stated} GB against compare's {gap:.2}"
    );
}

/// `--help` said the GPUs per node default to "8 for the bundled ones", but the bundled
/// gb200-nvl72 and gb300-nvl72 hold 4 (one compute tray), as the cluster line prints.
#[test]
fn gpus_per_node_help_names_the_nvl72_trays() {
    for command in ["plan", "eval", "sweep", "compare"] {
        let r = run(&[command, "--help"]);
        assert_eq!(r.code, 0, "{}", r.stderr);
        let help = r.stdout.split_whitespace().collect::<Vec<_>>().join(" ");
        if !help.contains("--gpus-per-node") {
            continue;
        }
        assert!(
            help.contains("4 for gb200-nvl72 and gb300-nvl72"),
            "{command} --help: {help:.400}"
        );
        assert!(!help.contains("8 for the bundled ones"), "{command}");
    }
    for gpu in ["gb200-nvl72", "gb300-nvl72"] {
        let r = run(&["plan", "--params", "70B", "--nodes", "16", "--gpu", gpu]);
        assert!(
            r.stdout
                .contains(&format!("cluster: 16 nodes x 4 {gpu} = 64 GPUs")),
            "{gpu}: {}",
            r.stdout
        );
    }
}

/// `--gpu h100` and `--model llama-3-70b` (the Hugging Face spelling) were refused with the whole
/// list and no pointer to the name meant; the error now says which bundled names match.
#[test]
fn unknown_bundled_names_suggest_the_ones_meant() {
    for (flag, asked, meant) in [
        (
            "--gpu",
            "h100",
            "(did you mean h100-sxm-80g or h100-sxm-96g-500w?)",
        ),
        ("--gpu", "GB200", "(did you mean gb200-nvl72?)"),
        ("--model", "llama-3-70b", "(did you mean llama3-70b?)"),
        ("--model", "Qwen3-235B", "(did you mean qwen3-235b-a22b?)"),
        ("--model", "deepseek_v3", "(did you mean deepseek-v3?)"),
    ] {
        let mut args = vec!["plan", "--nodes", "8", flag, asked];
        if flag == "--gpu" {
            args.extend(["--params", "7B"]);
        }
        let r = run(&args);
        common::assert_one_line_error(&r, &[&format!("\"{asked}\" {meant}; known: ")], &[], asked);
    }
    // Nothing like it: the list alone.
    let r = run(&["plan", "--params", "7B", "--nodes", "8", "--gpu", "tpu-v5"]);
    common::assert_one_line_error(
        &r,
        &["unknown GPU \"tpu-v5\"; known: "],
        &["did you mean"],
        "tpu",
    );
}
