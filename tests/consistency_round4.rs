//! Consistency, round 4: one quantity, one name, one number, wherever two commands print it.
//! Free memory (`eval`'s "GiB free" against `sweep`'s "headroom"), the search's time (ms on
//! `plan`, s on `sweep`), step times under 0.1 s (three digits in `plan`'s table, two in
//! `sweep`'s, the report's and `--emit`'s header), memory in `accuracy`'s JSON (GiB where every
//! other JSON says bytes), the amount a plan misses memory by (`plan`: "misses by", `eval`:
//! "short by"), and a plan file's `recompute_modules` beside a recompute that drops them.

mod common;

use common::*;
use serde_json::Value;

const GIB: f64 = (1u64 << 30) as f64;

/// The cells of a comfy-table row (`│ a ┆ b │`), trimmed.
fn cells(line: &str) -> Vec<String> {
    line.trim()
        .trim_start_matches('│')
        .trim_end_matches('│')
        .split('┆')
        .map(|c| c.trim().to_string())
        .collect()
}

/// The cell under `header` in the first data row of the first table in `text`.
fn first_row_cell(text: &str, header: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let head = lines
        .iter()
        .position(|l| l.starts_with('│') && cells(l).iter().any(|c| c == header))
        .unwrap_or_else(|| panic!("no column {header:?} in:\n{text}"));
    let column = cells(lines[head]).iter().position(|c| c == header).unwrap();
    let row = lines[head + 1..]
        .iter()
        .find(|l| l.starts_with('│'))
        .expect("a data row");
    cells(row)[column].clone()
}

/// `sweep` printed "headroom GiB" (JSON `memory.headroom_bytes`, chart "memory headroom") for
/// what `eval` calls "GiB free": capacity less total memory. Every output now says "free", with
/// the same number as `eval` of the same best plan.
#[test]
fn sweep_and_eval_call_capacity_less_memory_free_and_agree() {
    let dir = scratch("consistency4", "free");
    let saved = dir.join("best.yaml");
    let saved = saved.to_str().unwrap();
    let r = run(&["plan", "--params", "512B", "--nodes", "32", "--save", saved]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let eval = run(&["eval", "--plan", saved]);
    assert_eq!(eval.code, 0, "{}", eval.stderr);
    let total_line = eval
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with("total") && l.contains("GiB free"))
        .unwrap_or_else(|| panic!("no free line in:\n{}", eval.stdout));
    let eval_free = total_line
        .split("fits, ")
        .nth(1)
        .unwrap()
        .trim_end_matches(" GiB free")
        .to_string();

    let sweep = [
        "sweep", "--params", "512B", "--axis", "nodes", "--values", "32",
    ];
    let table = run(&sweep);
    assert_eq!(table.code, 0, "{}", table.stderr);
    assert!(!table.stdout.contains("headroom"), "{}", table.stdout);
    assert_eq!(first_row_cell(&table.stdout, "free GiB"), eval_free);

    let mut as_json = sweep.to_vec();
    as_json.extend(["--format", "json"]);
    let row = &json(&as_json)["rows"][0];
    assert!(row["memory"].get("headroom_bytes").is_none(), "{row}");
    let evaluated = json(&["eval", "--plan", saved, "--format", "json"]);
    let memory = &evaluated["plans"][0]["memory"];
    let want = memory["capacity_bytes"].as_f64().unwrap() - memory["total_bytes"].as_f64().unwrap();
    let free = row["memory"]["free_bytes"].as_f64().unwrap();
    assert!((free - want).abs() < 1.0, "{free} vs {want}");
    assert_eq!(format!("{:.1}", free / GIB), eval_free);

    let mut as_csv = sweep.to_vec();
    as_csv.extend(["--format", "csv"]);
    let csv = run(&as_csv);
    let header = csv.stdout.lines().next().unwrap();
    assert!(
        header.split(',').any(|c| c == "memory.free_bytes"),
        "{header}"
    );
    assert!(!header.contains("headroom"), "{header}");

    let chart = dir.join("sweep.svg");
    let mut charted = sweep.to_vec();
    charted.extend(["--chart", chart.to_str().unwrap()]);
    assert_eq!(run(&charted).code, 0);
    let svg = std::fs::read_to_string(&chart).unwrap();
    assert!(svg.contains("free memory (GiB)"), "no free-memory panel");
    assert!(!svg.contains("headroom"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `plan`'s search line said "— 72.9 ms on 2 threads", `sweep`'s header "searched in 0.25 s",
/// and the README's Speed table mixed "40 ms" with "1.5 s". Text says a search's time in ms
/// everywhere; JSON in seconds (`search.elapsed_s`).
#[test]
fn a_search_time_reads_in_one_unit_per_medium() {
    let plan = run(&["plan", "--params", "175B", "--nodes", "16"]);
    assert_eq!(plan.code, 0, "{}", plan.stderr);
    let line = plan
        .stdout
        .lines()
        .find(|l| l.starts_with("search: "))
        .unwrap();
    let time = line.split(" — ").nth(1).unwrap();
    let (number, rest) = time.split_once(' ').unwrap();
    assert!(number.parse::<f64>().is_ok(), "{line}");
    assert!(rest.starts_with("ms on "), "{line}");

    let sweep = run(&[
        "sweep", "--params", "175B", "--axis", "nodes", "--values", "16",
    ]);
    assert_eq!(sweep.code, 0, "{}", sweep.stderr);
    let header = sweep.stdout.lines().next().unwrap();
    let after = header.split(" searched in ").nth(1).unwrap();
    let (number, rest) = after.split_once(' ').unwrap();
    assert!(number.parse::<f64>().is_ok(), "{header}");
    assert!(rest.starts_with("ms)"), "{header}");

    let planned = json(&[
        "plan", "--params", "175B", "--nodes", "16", "--format", "json",
    ]);
    assert!(planned["search"]["elapsed_s"].as_f64().unwrap() > 0.0);
    assert!(planned["search"].get("elapsed_ms").is_none());

    let readme = std::fs::read_to_string(format!("{ROOT}/README.md")).unwrap();
    let speed = &readme[readme.find("## Speed").unwrap()..readme.find("## Layout").unwrap()];
    let mut rows = 0;
    for row in speed.lines().filter(|l| l.starts_with("| `tpsim plan")) {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        for time in [cells[3], cells[4]] {
            let (number, unit) = time.split_once(' ').unwrap();
            assert!(number.parse::<f64>().is_ok(), "{row}");
            assert!(unit.starts_with("ms"), "{time} in {row}");
        }
        rows += 1;
    }
    assert_eq!(rows, 5);
}

/// A 12 ms step read "0.0122" in `plan`'s table but "0.01" in `sweep`'s, the report's plans
/// table and `--emit`'s header. A step time in a table or a one-line mention now rounds as
/// `plan`'s table does (two decimals from 0.1 s, three significant digits below); breakdowns
/// (`eval`, `compare`'s terms) keep three decimals so their terms add up.
#[test]
fn a_short_step_rounds_alike_in_every_table() {
    let dir = scratch("consistency4", "step");
    let shape = [
        "--layers",
        "4",
        "--hidden",
        "512",
        "--heads",
        "8",
        "--seq-len",
        "512",
        "--global-batch",
        "64",
    ];
    let with = |head: &[&str], tail: &[&str]| -> Vec<String> {
        head.iter()
            .chain(shape.iter())
            .chain(tail.iter())
            .map(|s| s.to_string())
            .collect()
    };
    let go = |args: Vec<String>| {
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let r = run(&refs);
        assert_eq!(r.code, 0, "{args:?}: {}", r.stderr);
        r
    };
    let plan = go(with(&["plan"], &["--nodes", "1"]));
    let step = first_row_cell(&plan.stdout, "step s");
    assert!(step.starts_with("0.0"), "a step under 0.1 s: {step}");
    assert_eq!(
        step.len(),
        "0.0122".len(),
        "three significant digits: {step}"
    );

    let sweep = go(with(&["sweep", "--axis", "nodes", "--values", "1"], &[]));
    assert_eq!(first_row_cell(&sweep.stdout, "step s"), step);

    let emit = go(with(&["plan"], &["--nodes", "1", "--emit", "megatron"]));
    assert!(
        emit.stderr.contains(&format!(": {step} s per step,")),
        "want {step}: {}",
        emit.stderr
    );

    let out = dir.join("r");
    go(with(
        &["plan"],
        &["--nodes", "1", "--report", out.to_str().unwrap()],
    ));
    let html = std::fs::read_to_string(out.join("index.html")).unwrap();
    assert!(
        html.contains(&format!(">{step}<")),
        "the report's plans table has no {step}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every key of a JSON value, recursively, with its path.
fn keys(v: &Value, path: &str, out: &mut Vec<String>) {
    match v {
        Value::Object(map) => {
            for (k, v) in map {
                out.push(format!("{path}.{k}"));
                keys(v, &format!("{path}.{k}"), out);
            }
        }
        Value::Array(items) => {
            for item in items {
                keys(item, path, out);
            }
        }
        _ => {}
    }
}

/// `accuracy --format json` said memory as `predicted_memory_gib` (and the modern runs'
/// `published_peak_memory_gib`) where `plan` and `eval` say `memory.total_bytes`. Both are bytes
/// now, with the numbers the tables print in GiB.
#[test]
fn accuracy_json_says_memory_in_bytes_as_plan_does() {
    let rows = json(&["accuracy", "--format", "json"]);
    let mut all = Vec::new();
    keys(&rows, "", &mut all);
    assert!(all.iter().all(|k| !k.ends_with("_gib")), "{all:?}");
    let table = run(&["accuracy"]);
    let bloom = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == "bloom-176b-main")
        .unwrap();
    let bytes = bloom["predicted_memory_bytes"].as_f64().unwrap();
    let line = table
        .stdout
        .lines()
        .find(|l| l.contains("bloom-176b-main"))
        .unwrap();
    assert_eq!(cells(line).last().unwrap(), &format!("{:.1}", bytes / GIB));

    let modern = json(&[
        "accuracy",
        "--runs",
        "validation/modern_runs.yaml",
        "--format",
        "json",
    ]);
    let mut all = Vec::new();
    keys(&modern, "", &mut all);
    assert!(all.iter().all(|k| !k.ends_with("_gib")), "gib keys left");
    let run_row = modern
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["published_peak_memory_bytes"].is_number())
        .expect("a run with a published peak memory");
    let id = run_row["id"].as_str().unwrap();
    let table = run(&["accuracy", "--runs", "validation/modern_runs.yaml"]);
    let line = table.stdout.lines().find(|l| l.contains(id)).unwrap();
    let shown = format!(
        "{:.1} / {:.1}",
        run_row["published_peak_memory_bytes"].as_f64().unwrap() / GIB,
        run_row["predicted_memory_bytes"].as_f64().unwrap() / GIB
    );
    assert!(line.contains(&shown), "{shown} not in {line}");
    // The single-run view prints the same memory as `eval` would: the planned report's bytes.
    let one = json(&[
        "accuracy",
        "--runs",
        "validation/modern_runs.yaml",
        "--run",
        id,
        "--format",
        "json",
    ]);
    assert_eq!(
        one["run"]["predicted_memory_bytes"],
        one["planned"]["plans"][0]["memory"]["total_bytes"]
    );
}

/// `plan`'s closest miss said "(misses by 1.9 GiB)" and `eval` of that very plan "DOES NOT FIT:
/// short by 1.9 GiB"; `sweep`'s cell "needs 2076.5 of 79.7 GiB" where `plan` says "needs 2076.5
/// GiB of 79.7 GiB". One wording, one number; and every flag the line suggests is one `plan`
/// takes.
#[test]
fn a_plan_that_misses_memory_misses_by_one_amount_in_one_word() {
    let plan = run(&[
        "plan", "--params", "512B", "--nodes", "32", "--tp", "1", "--pp", "1",
    ]);
    assert_eq!(plan.code, 1, "{}", plan.stderr);
    let line = plan
        .stderr
        .lines()
        .find(|l| l.starts_with("nothing fits: closest:"))
        .unwrap();
    assert!(
        line.contains("closest: tp 1 pp 1 dp 256 mb 1 recompute full ZeRO-3 needs"),
        "{line}"
    );
    let amount = line
        .split("(misses by ")
        .nth(1)
        .unwrap()
        .split(')')
        .next()
        .unwrap();
    let eval = run(&[
        "eval",
        "--params",
        "512B",
        "--nodes",
        "32",
        "--tp",
        "1",
        "--pp",
        "1",
        "--micro-batch",
        "1",
        "--recompute",
        "full",
        "--zero",
        "3",
    ]);
    assert_eq!(eval.code, 1, "{}", eval.stderr);
    assert!(
        eval.stdout
            .contains(&format!("DOES NOT FIT: misses by {amount}")),
        "want {amount}: {}",
        eval.stdout
    );
    assert!(!eval.stdout.contains("short by"), "{}", eval.stdout);

    // The sweep's cell for a point where nothing fits, in `plan`'s words and numbers.
    let plan = run(&["plan", "--params", "2T", "--nodes", "2"]);
    assert_eq!(plan.code, 1, "{}", plan.stderr);
    let needs = plan
        .stderr
        .split(" needs ")
        .nth(1)
        .unwrap()
        .split(" (misses")
        .next()
        .unwrap()
        .to_string();
    let sweep = run(&[
        "sweep", "--params", "2T", "--axis", "nodes", "--values", "2",
    ]);
    assert_eq!(sweep.code, 1, "{}", sweep.stderr);
    assert!(
        sweep
            .stdout
            .contains(&format!("nothing fits: the closest needs {needs} (")),
        "want {needs}: {}",
        sweep.stdout
    );

    // Each flag a nothing-fits line suggests is one `plan --help` lists.
    let help = run(&["plan", "--help"]).stdout;
    let uneven = run(&[
        "plan",
        "--layers",
        "7",
        "--hidden",
        "32768",
        "--heads",
        "128",
        "--nodes",
        "2",
        "--global-batch",
        "8",
        "--seq-len",
        "8192",
        "--zero",
        "0",
    ]);
    assert_eq!(uneven.code, 1, "{}", uneven.stderr);
    let mut suggested = 0;
    for text in [&plan.stderr, &uneven.stderr] {
        let fix = text
            .lines()
            .find(|l| l.starts_with("nothing fits:"))
            .unwrap();
        for flag in fix
            .split(|c: char| c.is_whitespace() || c == ',' || c == '(' || c == ')')
            .filter(|w| w.starts_with("--"))
        {
            assert!(
                help.contains(&format!("{flag} ")) || help.contains(&format!("{flag}\n")),
                "{flag} is no flag of plan: {fix}"
            );
            suggested += 1;
        }
    }
    // The 2T model's weights and optimizer states alone outgrow the 16 GPUs, so its line names no
    // --seq-len (new-user round 25: a shorter sequence cannot close that gap); the 7-layer one
    // names --seq-len and --allow-uneven-pp.
    assert!(
        plan.stderr
            .contains("the weights and optimizer states alone take"),
        "{}",
        plan.stderr
    );
    assert!(suggested >= 2, "--seq-len and --allow-uneven-pp");
}

/// `eval --plan FILE` with `recompute_modules:` in the file and a recompute that is not selective
/// evaluated the plan without them and said nothing. Such a file is refused in one line (as the
/// flag is), by `eval`, `report` and `compare`; `plan --save` no longer writes modules for a plan
/// that does not use them, so its own files read back.
#[test]
fn a_plan_files_modules_are_used_or_refused() {
    let dir = scratch("consistency4", "modules");
    let full = dir.join("full.yaml");
    let full = full.to_str().unwrap();
    let r = run(&[
        "plan",
        "--model",
        "deepseek-v3",
        "--nodes",
        "64",
        "--global-batch",
        "1024",
        "--recompute",
        "full",
        "--save",
        full,
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let text = std::fs::read_to_string(full).unwrap();
    assert!(text.contains("  recompute: full\n"), "{text}");
    assert!(!text.contains("\nrecompute_modules:"), "{text}");
    let back = run(&["eval", "--plan", full]);
    assert_eq!(back.code, 0, "{}", back.stderr);

    let with_modules = dir.join("with-modules.yaml");
    let with_modules = with_modules.to_str().unwrap();
    std::fs::write(
        with_modules,
        format!("recompute_modules: [moe_act]\n{text}"),
    )
    .unwrap();
    let needles = [
        "with-modules.yaml: recompute_modules (moe_act)",
        "recompute: full is not selective",
        "drop recompute_modules",
    ];
    let eval = run(&["eval", "--plan", with_modules]);
    assert_one_line_error(&eval, &needles, &[], "eval");
    let report = run(&[
        "report",
        with_modules,
        "--out",
        dir.join("r").to_str().unwrap(),
    ]);
    assert_one_line_error(&report, &needles, &[], "report");
    let compare = run(&["compare", "--plan", with_modules, "--plan", with_modules]);
    assert_one_line_error(&compare, &needles, &[], "compare");
    let flag = run(&["eval", "--plan", with_modules, "--recompute", "none"]);
    assert_one_line_error(
        &flag,
        &[
            "--recompute none is not selective",
            "use --recompute selective",
        ],
        &[],
        "a --recompute flag",
    );
    // Used where the plan recomputes selectively (fitting or not: exit 0 or 1).
    let selective = run(&["eval", "--plan", with_modules, "--recompute", "selective"]);
    assert!(selective.code <= 1, "{}", selective.stderr);
    assert!(
        selective.stdout.contains("Megatron-Core modules moe_act"),
        "{}",
        selective.stdout
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The hint under a pinned `plan` where nothing fits named "the fastest" unpinned plan from the
/// closed-form ranking, at its closed-form time, where `plan` without the pins prints the
/// simulated schedule's order and time (for DeepSeek-V3 on 128 nodes with uneven stages the
/// closed form ranks tp 4 pp 1 first at 4.53 s, `plan` prints tp 2 pp 16 at 4.49 s). The hint
/// now names `plan`'s #1 row; this scenario pins the agreement (both rankings agree on it).
#[test]
fn the_pin_hint_names_the_plan_and_time_plan_prints_first() {
    let scenario = [
        "plan",
        "--params",
        "512B",
        "--nodes",
        "32",
        "--global-batch",
        "640",
        "--allow-uneven-pp",
        "--framework",
        "megatron-lm-2021",
    ];
    let unpinned = run(&scenario);
    assert_eq!(unpinned.code, 0, "{}", unpinned.stderr);
    let row = |header: &str| first_row_cell(&unpinned.stdout, header);
    let want = format!(
        "the fastest tp {} pp {} dp {} ({} s per step)",
        row("tp"),
        row("pp"),
        row("dp"),
        row("step s")
    );
    let mut pinned = scenario.to_vec();
    pinned.extend(["--tp", "1"]);
    let r = run(&pinned);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains(&want), "want {want}: {}", r.stderr);
}
