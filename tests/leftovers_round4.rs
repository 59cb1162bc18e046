//! Leftovers of the last hostile-input round: a context-parallel exchange beside cp 1, the
//! settings `--framework` replaces in a plan file, the framework and exchange in sweep's CSV,
//! memory parts that add up to the printed total, and a closest miss under a tenth of a GiB.

mod common;

use common::*;
use serde_json::Value;

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

fn stderr_line<'a>(r: &'a Run, start: &str) -> Option<&'a str> {
    r.stderr.lines().find(|l| l.starts_with(start))
}

/// `eval --tp 8 --cp-exchange head-all-to-all` (cp 1) and `plan --cp 1 --cp-exchange X` took the
/// exchange and changed nothing, without a word. A note says so now, with the way to use it; it
/// is not an error (the input is valid), and a plan with cp > 1 or an unpinned search says nothing.
#[test]
fn a_cp_exchange_beside_cp_1_is_said_to_change_nothing() {
    let eval = |extra: &[&str]| {
        let mut args = vec![
            "eval",
            "--model",
            "llama3-8b",
            "--nodes",
            "1",
            "--global-batch",
            "64",
        ];
        args.extend(extra);
        run(&args)
    };
    let r = eval(&["--tp", "8", "--cp-exchange", "head-all-to-all"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let note = stderr_line(&r, "note: --cp-exchange head-all-to-all changes nothing")
        .unwrap_or_else(|| panic!("no note: {}", r.stderr));
    for words in ["cp 1", "give --cp 2 or more", "drop --cp-exchange"] {
        assert!(note.contains(words), "{words:?} in: {note}");
    }
    let r = eval(&["--tp", "4", "--cp", "2", "--cp-exchange", "head-all-to-all"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!r.stderr.contains("changes nothing"), "{}", r.stderr);

    let plan = |extra: &[&str]| {
        let mut args = vec![
            "plan",
            "--model",
            "llama3-8b",
            "--nodes",
            "1",
            "--global-batch",
            "64",
            "--cp-exchange",
            "kv-all-gather",
        ];
        args.extend(extra);
        run(&args)
    };
    let r = plan(&["--cp", "1"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let note = stderr_line(&r, "note: --cp-exchange kv-all-gather changes nothing")
        .unwrap_or_else(|| panic!("no note: {}", r.stderr));
    for words in ["--cp 1 pins", "pin --cp 2 or more", "drop --cp-exchange"] {
        assert!(note.contains(words), "{words:?} in: {note}");
    }
    // Unpinned, the search may propose cp > 1 under the exchange: nothing to say.
    let r = plan(&[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!r.stderr.contains("changes nothing"), "{}", r.stderr);
}

/// `eval --plan FILE --framework X` took X's exchange, overlap and other defaults in place of the
/// file's without a word (a cp-2 file's `cp_exchange: kv-ring` became torchtitan's
/// torch-all-gather). One note names each key the file states that X replaced, the value used and
/// the flag that keeps the file's, or that X does not run it.
#[test]
fn framework_over_a_plan_file_names_the_settings_it_replaces() {
    let dir = scratch("leftovers4", "framework-over-file");
    let r = run_in(
        &dir,
        &[
            "plan",
            "--model",
            "llama3-8b",
            "--nodes",
            "1",
            "--tp",
            "4",
            "--cp",
            "2",
            "--global-batch",
            "64",
            "--tp-comm-overlap",
            "false",
            // ZeRO-3, which torchtitan runs beside cp > 1 (it shards over the cp ranks).
            "--zero",
            "3",
            "--save",
            "p.yaml",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let saved = std::fs::read_to_string(dir.join("p.yaml")).unwrap();
    assert!(saved.contains("cp_exchange: kv-ring"), "{saved}");
    assert!(saved.contains("  cp: 2\n"), "{saved}");
    let eval = |file: &str, extra: &[&str]| {
        let mut args = vec!["eval", "--plan", file];
        args.extend(extra);
        let r = run_in(&dir, &args);
        assert!(r.code == 0 || r.code == 1, "{args:?}: {}", r.stderr);
        r
    };
    let note_of = |r: &Run, framework: &str, file: &str| {
        stderr_line(
            r,
            &format!("note: --framework {framework} evaluates {file} with {framework}'s own settings in place of the file's: "),
        )
        .map(str::to_string)
    };

    let r = eval("p.yaml", &["--framework", "torchtitan"]);
    let note = note_of(&r, "torchtitan", "p.yaml").unwrap_or_else(|| panic!("{}", r.stderr));
    for words in [
        "cp_exchange: kv-ring is now torch-all-gather (--cp-exchange kv-ring keeps the file's)",
        "drop --framework to evaluate the file as saved",
    ] {
        assert!(note.contains(words), "{words:?} in: {note}");
    }
    assert_eq!(r.stderr.matches("in place of the file's").count(), 1);
    // The exchange given as a flag is the user's: not named.
    let r = eval(
        "p.yaml",
        &["--framework", "torchtitan", "--cp-exchange", "kv-ring"],
    );
    let note = note_of(&r, "torchtitan", "p.yaml").unwrap_or_default();
    assert!(!note.contains("cp_exchange"), "{}", r.stderr);

    // The file's own framework by name still resets the overlap it saved.
    let r = eval("p.yaml", &["--framework", "megatron-core"]);
    let note = note_of(&r, "megatron-core", "p.yaml").unwrap_or_else(|| panic!("{}", r.stderr));
    assert!(
        note.contains(
            "overlap tp_comm: false is now true (--tp-comm-overlap false keeps the file's)"
        ),
        "{note}"
    );
    assert!(!note.contains("cp_exchange"), "{note}");

    // DeepSpeed runs no ring: said so, with no flag to keep it (Ulysses runs without TP: the
    // file's tp 4 x cp 2 made tp 1 x cp 2 x dp 4).
    assert!(
        saved.contains("  tp: 4\n") && saved.contains("  dp: 1\n"),
        "{saved}"
    );
    std::fs::write(
        dir.join("q.yaml"),
        saved
            .replace("sequence_parallel: true", "sequence_parallel: false")
            .replace("  tp: 4\n", "  tp: 1\n")
            .replace("  dp: 1\n", "  dp: 4\n"),
    )
    .unwrap();
    let r = eval("q.yaml", &["--framework", "deepspeed"]);
    let note = note_of(&r, "deepspeed", "q.yaml").unwrap_or_else(|| panic!("{}", r.stderr));
    assert!(
        note.contains(
            "cp_exchange: kv-ring is now head-all-to-all (deepspeed does not run kv-ring)"
        ),
        "{note}"
    );

    // Without --framework the file is evaluated as saved: no note.
    let r = eval("p.yaml", &[]);
    assert!(!r.stderr.contains("in place of the file's"), "{}", r.stderr);
    let _ = std::fs::remove_dir_all(dir);
}

/// `sweep --format csv` had no framework and cp_exchange columns (only its JSON said them); both
/// are on every row now, beside the scenario's columns, and the reason stays the last column.
#[test]
fn sweep_csv_names_the_framework_and_cp_exchange() {
    let args = |format: &'static str| {
        [
            "sweep",
            "--model",
            "llama3-8b",
            "--axis",
            "nodes",
            "--values",
            "1,2",
            "--global-batch",
            "64",
            "--framework",
            "torchtitan",
            "--format",
            format,
        ]
    };
    let r = run(&args("csv"));
    assert_eq!(r.code, 0, "{}", r.stderr);
    let lines: Vec<&str> = r.stdout.lines().collect();
    let header: Vec<&str> = lines[0].split(',').collect();
    let col = |name: &str| {
        header
            .iter()
            .position(|h| *h == name)
            .unwrap_or_else(|| panic!("no {name} column: {header:?}"))
    };
    assert_eq!(col("framework"), col("global_batch") + 1, "{header:?}");
    assert_eq!(col("cp_exchange"), col("framework") + 1, "{header:?}");
    assert_eq!(header.last(), Some(&"no_valid_plan"));
    let sweep: Value = serde_json::from_str(&run(&args("json")).stdout).unwrap();
    assert_eq!(sweep["framework"], "torchtitan");
    for row in &lines[1..] {
        let cells: Vec<String> = csv_cells(row);
        assert_eq!(cells.len(), header.len(), "{row}");
        assert_eq!(cells[col("framework")], "torchtitan", "{row}");
        assert_eq!(
            cells[col("cp_exchange")],
            sweep["cp_exchange"].as_str().unwrap(),
            "{row}"
        );
        assert_eq!(cells[col("cp_exchange")], "torch-all-gather", "{row}");
    }
}

/// The memory parts of `eval`'s breakdown were each rounded to 0.1 GiB and missed the printed
/// total by 0.1-0.2 GiB (7.5 + 15.0 + 2.8 + 19.0 + 3.0 = 47.3 beside a total of 47.2). They add
/// up now (each part rounded alone, "other" the rest of the printed total), in `eval` and in
/// `compare`'s table; the JSON keeps the bytes.
#[test]
fn memory_parts_add_up_to_the_printed_total() {
    let dir = scratch("leftovers4", "memory-parts");
    let parts = ["weights", "gradients", "optimizer", "activations", "other"];
    let tenths = |text: &str| (text.parse::<f64>().unwrap() * 10.0).round() as i64;
    let mut naive_missed = false;
    let mut shown = Vec::new();
    for (name, tp, mb) in [("a.yaml", "2", "1"), ("b.yaml", "8", "2")] {
        let r = run_in(
            &dir,
            &[
                "plan",
                "--model",
                "llama3-8b",
                "--nodes",
                "4",
                "--tp",
                tp,
                "--pp",
                "1",
                "--micro-batch",
                mb,
                "--global-batch",
                "64",
                "--save",
                name,
            ],
        );
        assert_eq!(r.code, 0, "{}", r.stderr);
        let r = run_in(&dir, &["eval", "--plan", name, "--format", "json"]);
        assert_eq!(r.code, 0, "{}", r.stderr);
        let v: Value = serde_json::from_str(&r.stdout).unwrap();
        let memory = &v["plans"][0]["memory"];
        let exact: Vec<f64> = parts
            .iter()
            .map(|p| memory[format!("{p}_bytes")].as_f64().unwrap() / GIB)
            .collect();
        let total = memory["total_bytes"].as_f64().unwrap() / GIB;
        let total_tenths = (total * 10.0).round() as i64;
        naive_missed |=
            exact.iter().map(|g| (g * 10.0).round() as i64).sum::<i64>() != total_tenths;

        let r = run_in(&dir, &["eval", "--plan", name]);
        assert_eq!(r.code, 0, "{}", r.stderr);
        let printed: Vec<i64> = parts
            .iter()
            .map(|p| {
                let line = r
                    .stdout
                    .lines()
                    .find(|l| l.trim_start().starts_with(&format!("{p} ")))
                    .unwrap_or_else(|| panic!("no {p} line: {}", r.stdout));
                tenths(line.split_whitespace().nth(1).unwrap())
            })
            .collect();
        let total_line = r
            .stdout
            .lines()
            .find(|l| l.trim_start().starts_with("total "))
            .unwrap();
        assert_eq!(
            tenths(total_line.split_whitespace().nth(1).unwrap()),
            total_tenths
        );
        assert_eq!(printed.iter().sum::<i64>(), total_tenths, "{}", r.stdout);
        // Each named part is its exact value rounded to a tenth, as it prints alone; "other" is
        // the rest of the printed total, within a quarter GiB of its exact value.
        for (p, g) in printed.iter().zip(&exact).take(4) {
            assert_eq!(*p, (g * 10.0).round() as i64, "{p} for {g}: {}", r.stdout);
        }
        assert!(
            (printed[4] as f64 / 10.0 - exact[4]).abs() <= 0.25 + 1e-9,
            "other {} for {}: {}",
            printed[4],
            exact[4],
            r.stdout
        );
        shown.push((printed, total_tenths));
    }
    assert!(
        naive_missed,
        "neither plan's parts, rounded alone, miss the total: the test no longer tests"
    );
    // compare prints the same parts, and they add up to its total row.
    let r = run_in(&dir, &["compare", "--plan", "a.yaml", "--plan", "b.yaml"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let row = |term: &str| -> Vec<i64> {
        let line = r
            .stdout
            .lines()
            .find(|l| l.contains("memory per GPU") && l.contains(&format!(" {term} ")))
            .unwrap_or_else(|| panic!("no {term} row: {}", r.stdout));
        let cells: Vec<&str> = line.split(['│', '┆']).map(str::trim).collect();
        vec![tenths(cells[4]), tenths(cells[5])]
    };
    for (plan, (printed, total)) in shown.iter().enumerate() {
        let compared: Vec<i64> = parts.iter().map(|p| row(p)[plan]).collect();
        assert_eq!(&compared, printed, "{}", r.stdout);
        assert_eq!(row("total")[plan], *total, "{}", r.stdout);
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// `plan`'s "nothing fits: closest ... needs 19.8 GiB of 19.8 GiB (misses by 0.0 GiB)" where the
/// closest plan missed by under 0.05 GiB; it says "misses by under 0.1 GiB" now, as `eval` does.
#[test]
fn a_closest_miss_under_a_tenth_says_under_0_1() {
    let base = ["--model", "llama3-8b", "--global-batch", "64"];
    // The least memory any plan needs: the closest miss when nothing fits.
    let mut sweep = vec!["sweep", "--axis", "nodes", "--values", "1"];
    sweep.extend(base);
    sweep.extend(["--max-memory-gib", "1", "--format", "json"]);
    let v = json(&sweep);
    let least_gib = v["rows"][0]["memory"]["closest_miss_bytes"]
        .as_f64()
        .unwrap()
        / GIB;
    // A limit a few thousandths of a GiB under it: the two print alike.
    let limit = format!("{:.3}", (least_gib * 1000.0).floor() / 1000.0 - 0.003);
    let mut plan = vec!["plan", "--nodes", "1"];
    plan.extend(base);
    plan.extend(["--max-memory-gib", &limit]);
    let r = run(&plan);
    assert_eq!(r.code, 1, "{}", r.stderr);
    let line = stderr_line(&r, "nothing fits: closest:").unwrap_or_else(|| panic!("{}", r.stderr));
    assert!(line.contains("(misses by under 0.1 GiB)"), "{line}");
    assert!(!line.contains("misses by 0.0"), "{line}");
    let shown = format!("{least_gib:.1}");
    assert!(
        line.contains(&format!("needs {shown} GiB of {shown} GiB")),
        "{line}"
    );
}
