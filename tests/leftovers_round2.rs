//! Regressions from the second round of review leftovers: one quantity printed by two commands
//! (or two lines of one) under one name, one number, one rounding and one unit (each test names
//! what was printed before).

mod common;
use common::{run, scratch};

const SCENARIO: [&str; 4] = ["--params", "512B", "--nodes", "32"];

fn with<'a>(base: &[&'a str], more: &[&'a str]) -> Vec<&'a str> {
    base.iter().chain(more).copied().collect()
}

/// The line of `text` that starts with `prefix` (after leading spaces), without the prefix.
fn line_after<'a>(text: &'a str, prefix: &str) -> &'a str {
    text.lines()
        .find_map(|l| l.trim_start().strip_prefix(prefix))
        .unwrap_or_else(|| panic!("no line starting {prefix:?} in:\n{text}"))
}

/// `plan --emit`'s header described the plan as "tp 8 x cp 1 x pp 16 x dp 2 (vpp 7, micro-batch
/// 1, recompute none, ZeRO-1, bf16)", without sequence parallelism, where `eval` of the emitted
/// configuration says "... sequence parallel on, recompute none, ZeRO-1, bf16 GEMMs". The header
/// now names the plan in eval's words.
#[test]
fn emit_header_names_the_plan_as_eval_does() {
    let emitted = run(&with(&["plan"], &with(&SCENARIO, &["--emit", "megatron"])));
    assert_eq!(emitted.code, 0, "{}", emitted.stderr);
    let header = line_after(&emitted.stderr, "Megatron-LM configuration for ");
    let (plan_words, numbers) = header.rsplit_once(": ").expect("header numbers");
    assert!(numbers.ends_with(" GiB"), "{header}");
    assert!(plan_words.contains("sequence parallel on"), "{header}");
    // The emitted arguments read back through eval describe the same plan in the same words.
    let mut args = vec!["eval", "--nodes", "32"];
    args.extend(emitted.stdout.split_whitespace());
    let eval = run(&args);
    assert_eq!(eval.code, 0, "{}", eval.stderr);
    assert_eq!(plan_words, line_after(&eval.stdout, "plan: "));
    // NeMo's and DeepSpeed's headers name sequence parallelism the same way.
    for framework in ["nemo", "deepspeed"] {
        let r = run(&with(&["plan"], &with(&SCENARIO, &["--emit", framework])));
        assert_eq!(r.code, 0, "{framework}: {}", r.stderr);
        let header = r
            .stderr
            .lines()
            .find(|l| l.contains(" configuration for tp "))
            .unwrap_or_else(|| panic!("{framework}: no header in {}", r.stderr));
        assert!(
            header.contains(", sequence parallel on, recompute "),
            "{header}"
        );
        assert!(header.contains(" GEMMs: "), "{header}");
    }
}

/// The GB figure before `word` in `line` ("3748.70 GB ...").
fn gb_before(line: &str, word: &str) -> String {
    let (before, _) = line
        .split_once(word)
        .unwrap_or_else(|| panic!("no {word:?} in {line}"));
    before.rsplit([' ', '(']).next().unwrap().to_string()
}

/// `plan`'s "why the best plan" lines printed TP's and DP's traffic to 1 decimal ("3748.7 GB",
/// "12.4 GB") and PP's to 2 ("107.11 GB"); eval's communication table prints all of them to 2
/// ("3748.70 GB", "12.42 GB"). Each line now prints eval's number.
#[test]
fn why_lines_print_traffic_as_evals_communication_table() {
    let plan = run(&with(&["plan"], &SCENARIO));
    assert_eq!(plan.code, 0, "{}", plan.stderr);
    let eval = run(&with(
        &["eval"],
        &with(
            &SCENARIO,
            &[
                "--tp",
                "8",
                "--pp",
                "16",
                "--dp",
                "2",
                "--vpp",
                "7",
                "--micro-batch",
                "1",
                "--sequence-parallel",
                "--recompute",
                "none",
                "--zero",
                "1",
            ],
        ),
    ));
    assert_eq!(eval.code, 0, "{}", eval.stderr);
    // The test's plan is the search's best.
    assert!(
        plan.stdout.contains("TP 8: ")
            && plan.stdout.contains("PP 16: ")
            && plan.stdout.contains("DP 2 with ZeRO-1: "),
        "{}",
        plan.stdout
    );
    for (why, table) in [
        ("TP 8: ", "TP "),
        ("PP 16: ", "PP "),
        ("DP 2 with ZeRO-1: ", "DP "),
    ] {
        let why_gb = gb_before(line_after(&plan.stdout, why), " GB per GPU per step");
        let table_line = eval
            .stdout
            .lines()
            .map(str::trim_start)
            .find(|l| l.starts_with(table) && l.contains(" GB on "))
            .unwrap_or_else(|| panic!("no {table:?} row in {}", eval.stdout));
        let table_gb = gb_before(table_line, " GB on ");
        assert_eq!(why_gb, table_gb, "{why}vs {table_line}");
        assert_eq!(
            why_gb.split_once('.').map(|(_, d)| d.len()),
            Some(2),
            "{why_gb}"
        );
    }
}

/// The sweep table's header said "best plan at each of 1 points" for a single point.
#[test]
fn sweep_header_counts_one_point_in_the_singular() {
    let r = run(&with(
        &["sweep", "--axis", "nodes", "--values", "32"],
        &SCENARIO[..2],
    ));
    assert_eq!(r.code, 0, "{}", r.stderr);
    let header = line_after(&r.stdout, "sweep over nodes: ");
    assert!(header.starts_with("best plan at 1 point ("), "{header}");
    assert!(!r.stdout.contains("1 points"), "{}", r.stdout);
}

/// The sweep and compare labels wrote the recompute as "recompute=full 3/7" and
/// "recompute=none" where plan's table, eval and accuracy write "full 3/7" after "recompute".
/// The label now writes "recompute full 3/7", the plan table's value after eval's name.
#[test]
fn plan_labels_write_recompute_as_eval_does() {
    let dir = scratch("leftovers2", "labels");
    let seed =
        std::fs::read_to_string(format!("{}/plans/seed-512b-32nodes.yaml", common::ROOT)).unwrap();
    let full = seed.replace(
        "recompute: selective",
        "recompute: full\n  recompute_num_layers: 3",
    );
    assert_ne!(full, seed);
    let file = dir.join("full3.yaml");
    std::fs::write(&file, full).unwrap();
    let file = file.to_str().unwrap();
    let eval = run(&["eval", "--plan", file]);
    assert_eq!(eval.code, 0, "{}", eval.stderr);
    let recompute = line_after(&eval.stdout, "plan: ")
        .split(", ")
        .find_map(|w| w.strip_prefix("recompute "))
        .expect("recompute in the plan line")
        .to_string();
    assert_eq!(recompute, "full 3/7");
    let compare = run(&[
        "compare",
        "--plan",
        "plans/seed-512b-32nodes.yaml",
        "--plan",
        file,
    ]);
    assert_eq!(compare.code, 0, "{}", compare.stderr);
    assert!(
        compare
            .stdout
            .contains(&format!(" sp recompute {recompute} ZeRO-1 ")),
        "{}",
        compare.stdout
    );
    assert!(!compare.stdout.contains("recompute="), "{}", compare.stdout);
    // The sweep's best plan: plan's table says "none" in its recomp column.
    let sweep = run(&with(
        &["sweep", "--axis", "nodes", "--values", "32"],
        &SCENARIO[..2],
    ));
    assert_eq!(sweep.code, 0, "{}", sweep.stderr);
    assert!(
        sweep.stdout.contains(" sp recompute none ZeRO-1 "),
        "{}",
        sweep.stdout
    );
    assert!(!sweep.stdout.contains("recompute="), "{}", sweep.stdout);
}

/// The cells of each row of a comfy-table (`│ a ┆ b │`), header first.
fn table_rows(stdout: &str) -> Vec<Vec<String>> {
    stdout
        .lines()
        .filter(|l| l.starts_with('│'))
        .map(|l| {
            l.trim_matches(|c| c == '│' || c == ' ')
                .split('┆')
                .map(|c| c.trim().to_string())
                .collect()
        })
        .collect()
}

/// The cell under `column` in the first row after the header.
fn first_row_cell(stdout: &str, column: &str) -> String {
    let rows = table_rows(stdout);
    let i = rows[0]
        .iter()
        .position(|c| c == column)
        .unwrap_or_else(|| panic!("no {column:?} column in {stdout}"));
    rows[1][i].clone()
}

/// The sweep printed the time to train as "days to train" to one decimal (0.1 for a 2.7-hour
/// run, "0.056" beside it), where plan's table says "2.7 h" under "train" and eval "time to
/// train: 2.7 h". The sweep now prints plan's column and cell.
#[test]
fn sweep_prints_time_to_train_as_plan_does() {
    let scenario = ["--params", "7B", "--tokens", "1B"];
    let plan = run(&with(&["plan", "--nodes", "1", "--top", "1"], &scenario));
    assert_eq!(plan.code, 0, "{}", plan.stderr);
    let sweep = run(&with(
        &["sweep", "--axis", "nodes", "--values", "1"],
        &scenario,
    ));
    assert_eq!(sweep.code, 0, "{}", sweep.stderr);
    let planned = first_row_cell(&plan.stdout, "train");
    assert_eq!(planned, "2.7 h");
    assert_eq!(first_row_cell(&sweep.stdout, "train"), planned);
    assert!(!sweep.stdout.contains("days to train"), "{}", sweep.stdout);
    // Long runs read in days in both.
    let long = ["--params", "512B", "--tokens", "300B"];
    let plan = run(&with(&["plan", "--nodes", "32", "--top", "1"], &long));
    let sweep = run(&with(
        &["sweep", "--axis", "nodes", "--values", "32"],
        &long,
    ));
    assert_eq!(first_row_cell(&plan.stdout, "train"), "80.2 days");
    assert_eq!(first_row_cell(&sweep.stdout, "train"), "80.2 days");
}

/// `accuracy`'s table labelled its plans "tp1 pp1 dp32 vpp1 mb16 gbs512 full zero0" (the
/// recompute unnamed, sequence parallelism never shown) where sweep and compare write "... mb16
/// recompute full zero0" for the same plan. It now writes their label, with the run's batch.
#[test]
fn accuracy_labels_plans_as_sweep_and_compare_do() {
    let r = run(&["accuracy"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let row = table_rows(&r.stdout)
        .into_iter()
        .find(|cells| cells[0] == "megatron-sc21-t1-1.7b")
        .unwrap_or_else(|| panic!("no run row in {}", r.stdout));
    assert_eq!(
        row[3],
        "tp1 pp1 dp32 vpp1 mb16 recompute full ZeRO-0 gbs512"
    );
}

/// `compare`'s verdict gave the bubble ratio's m as the step's micro-batches, "(p-1)/(v·m) =
/// 0.234 (pp 16 vpp 1 m 768)" (15/768 is 0.020), where the ratio and plan's "why" line use one
/// schedule's: "0.234 with v=1, m=64 per schedule x 12 schedules". It now writes plan's p, v and m:
/// "(p=16 v=1 m=64 per schedule x 12 schedules)".
#[test]
fn compare_names_the_bubble_ratios_m_as_plan_does() {
    // GPT-3's shape, untied: torchtitan runs tied embeddings only without a pipeline
    // (physics round 30), and `--params` builds a tied GPT.
    let scenario = [
        "--layers",
        "96",
        "--hidden",
        "12288",
        "--heads",
        "96",
        "--style",
        "llama",
        "--nodes",
        "16",
        "--local-batch",
        "64",
        "--framework",
        "torchtitan",
    ];
    let plan = run(&with(&["plan", "--top", "2"], &scenario));
    assert_eq!(plan.code, 0, "{}", plan.stderr);
    let why = line_after(&plan.stdout, "PP 16: ");
    let m_words = why
        .split_once(" with v=1, ")
        .unwrap_or_else(|| panic!("no v=1 in {why}"))
        .1
        .trim_end_matches(')');
    assert_eq!(m_words, "m=64 per schedule x 12 schedules");
    let compare = run(&with(&["compare"], &scenario));
    assert_eq!(compare.code, 0, "{}", compare.stderr);
    let verdict = compare
        .stdout
        .lines()
        .find(|l| l.contains(" faster than "))
        .unwrap_or_else(|| panic!("no verdict in {}", compare.stdout));
    assert!(
        verdict.contains(&format!(
            "(p-1)/(v·m) = 0.234 (p=16 v=1 {m_words}) against "
        )),
        "{verdict}"
    );
    assert!(!verdict.contains(" m 768"), "{verdict}");
}

/// The NeMo fragment's comment line said it was "written by tpsim for a plan evaluated as
/// --framework megatron-core runs it", naming no plan (and, under `eval --emit`, nothing else
/// does). It now names the plan in eval's words.
#[test]
fn nemo_comment_names_the_plan_as_eval_does() {
    let plan = [
        "--tp",
        "8",
        "--pp",
        "16",
        "--dp",
        "2",
        "--vpp",
        "7",
        "--micro-batch",
        "1",
        "--sequence-parallel",
        "--recompute",
        "none",
        "--zero",
        "1",
    ];
    let eval = run(&with(&["eval"], &with(&SCENARIO, &plan)));
    assert_eq!(eval.code, 0, "{}", eval.stderr);
    let words = line_after(&eval.stdout, "plan: ");
    let emitted = run(&with(
        &["eval"],
        &with(&SCENARIO, &with(&plan, &["--emit", "nemo"])),
    ));
    assert_eq!(emitted.code, 0, "{}", emitted.stderr);
    let comment = emitted.stdout.lines().next().unwrap();
    assert!(comment.starts_with("# "), "{comment}");
    assert!(
        comment.contains(&format!(" written by tpsim for {words}, evaluated as ")),
        "{comment}\nvs {words}"
    );
}
