//! Regressions from the nineteenth review of valid usage by a new user: an ML infrastructure
//! engineer follows the README's first screen, then plans Llama 3.1 8B/70B on one and two nodes,
//! a 1T dense model on 4,096 GB300, Qwen3-30B-A3B on one node, GPT-OSS-120B, DeepSeek-V3 in
//! MXFP8 on GB200, a 1M-token context with CP, A100 40 GB and H800 clusters with time and cost
//! to train, pinned searches, `compare` of two saved plans, `sweep`, `report` (figures rendered
//! and looked at) and `--emit` (each test names the finding).

mod common;
use common::{assert_one_line_error, run, scratch};
use std::path::Path;

fn stdout_of(args: &[&str]) -> String {
    let r = run(args);
    assert_eq!(r.code, 0, "{args:?}: {}", r.stderr);
    r.stdout
}

/// `sweep --axis cp` (to see the best plan at each context-parallel degree) got clap's
/// "invalid value 'cp' ... tip: a similar value exists: 'cpu-offload-layers'": CPU activation
/// offloading offered for context parallelism. A plan degree given as the axis is now said to
/// be one (the search picks it at each point), with the axes sweep has and `plan --cp N` as the
/// fix.
#[test]
fn a_plan_degree_as_the_sweep_axis_is_named_as_one() {
    for (axis, flag) in [
        ("cp", "--cp"),
        ("ep", "--ep"),
        ("tp", "--tp"),
        ("mb", "--micro-batch"),
    ] {
        let r = run(&[
            "sweep",
            "--model",
            "llama3-8b",
            "--nodes",
            "4",
            "--axis",
            axis,
            "--values",
            "1,2,4",
        ]);
        assert_one_line_error(
            &r,
            &[
                &format!("--axis {axis}: {flag} is a degree of the plan"),
                "nodes, params, gpu, network-bandwidth, seq-len, global-batch, cpu-offload-layers",
                &format!("tpsim plan ... {flag} N"),
            ],
            &["similar value", "invalid value"],
            axis,
        );
    }
    // A word that is no degree keeps clap's own message.
    let r = run(&[
        "sweep", "--params", "70B", "--nodes", "4", "--axis", "foo", "--values", "1",
    ]);
    assert_one_line_error(&r, &["invalid value 'foo'"], &["degree of the plan"], "foo");
}

/// `compare` of a tp 8 × cp 2 × pp 4 plan and a tp 4 × pp 8 one (both vpp 10) said "pipeline
/// bubble 0.1 points less ((p-1)/(v·m) = 0.005 (p=4 v=10 m=64) against 0.005 (p=8 v=10
/// m=128))": two ratios that differ (3/640, 7/1280) printed as one value beside a sentence saying
/// one is less. They now print with the decimals that tell them apart.
#[test]
fn compare_prints_differing_bubble_ratios_differently() {
    let dir = scratch("new-user-19", "bubble");
    let save = |name: &str, pins: &[&str]| {
        let path = dir.join(name);
        let mut args = vec![
            "plan",
            "--model",
            "llama3-70b",
            "--nodes",
            "8",
            "--global-batch",
            "256",
            "--vpp",
            "10",
            "--top",
            "1",
            "--save",
            path.to_str().unwrap(),
        ];
        args.extend_from_slice(pins);
        stdout_of(&args);
        path
    };
    let a = save("a.yaml", &["--tp", "8", "--pp", "4", "--cp", "2"]);
    let b = save("b.yaml", &["--tp", "4", "--pp", "8"]);
    let out = stdout_of(&[
        "compare",
        "--plan",
        a.to_str().unwrap(),
        "--plan",
        b.to_str().unwrap(),
    ]);
    let verdict = out
        .lines()
        .find(|l| l.contains("pipeline bubble") && l.contains("(p-1)/(v·m) = "))
        .unwrap_or_else(|| panic!("no bubble term in the verdict:\n{out}"));
    let ratios: Vec<f64> = verdict
        .split("(p-1)/(v·m) = ")
        .nth(1)
        .unwrap()
        .split(" against ")
        .map(|part| part.split(' ').next().unwrap().parse::<f64>().unwrap())
        .collect();
    assert_eq!(ratios.len(), 2, "{verdict}");
    assert!(
        ratios[0] != ratios[1],
        "two bubble ratios printed as one: {verdict}"
    );
    // Each printed ratio is its plan's (p-1)/(v·m) to the digits shown.
    for (ratio, exact) in ratios.iter().zip([3.0 / 640.0, 7.0 / 1280.0]) {
        assert!(
            (ratio - exact).abs() < 1e-4,
            "{ratio} for {exact}: {verdict}"
        );
    }
}

/// The table rows of `plan`'s text output: each row's cells by the header's column names.
fn table_rows(out: &str) -> Vec<std::collections::HashMap<String, String>> {
    let mut header: Vec<String> = Vec::new();
    let mut rows = Vec::new();
    for line in out.lines().filter(|l| l.starts_with('│')) {
        let cells: Vec<String> = line
            .trim_matches('│')
            .split('┆')
            .map(|c| c.trim().to_string())
            .collect();
        if header.is_empty() {
            header = cells;
        } else {
            rows.push(header.iter().cloned().zip(cells).collect());
        }
    }
    rows
}

/// Every text element of an SVG, trimmed, in document order.
fn svg_texts(svg: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = svg;
    while let Some(start) = rest.find("<text") {
        let tail = &rest[start..];
        let close = tail.find("</text>").unwrap();
        let element = &tail[..close];
        out.push(element[element.find('>').unwrap() + 1..].trim().to_string());
        rest = &tail[close..];
    }
    out
}

/// The step-time figure's bars in order: (rank, tp, pp, dp) from each bar's label, where the
/// label is "#N t8·p2·d1", or "#N" with its degrees in a text of their own, or "this plan
/// (search #N)" for the evaluated plan.
fn bars(dir: &Path) -> Vec<(usize, u32, u32, u32)> {
    let svg = std::fs::read_to_string(dir.join("step_time.svg")).unwrap();
    let texts = svg_texts(&svg);
    let mut ranks = Vec::new();
    let mut degrees = Vec::new();
    for text in &texts {
        let rank_word = text
            .strip_prefix("this plan (search #")
            .map(|r| r.split(')').next().unwrap())
            .or_else(|| text.strip_prefix('#').map(|r| r.split(' ').next().unwrap()));
        if let Some(rank) = rank_word.and_then(|r| r.parse::<usize>().ok()) {
            ranks.push(rank);
        }
        // "t8·p2·d1", not the axis title's "t·c·p·d·e·et;".
        let label = text.split(' ').find(|w| {
            w.starts_with('t')
                && w[1..].starts_with(|c: char| c.is_ascii_digit())
                && w.contains('·')
        });
        if let Some(label) = label {
            let degree = |prefix: char| {
                label
                    .split('·')
                    .find(|part| {
                        part.starts_with(prefix) && part[1..].chars().all(|c| c.is_ascii_digit())
                    })
                    .map_or(1, |part| part[1..].parse::<u32>().unwrap())
            };
            degrees.push((degree('t'), degree('p'), degree('d')));
        }
    }
    assert_eq!(ranks.len(), degrees.len(), "{texts:?}");
    ranks
        .into_iter()
        .zip(degrees)
        .map(|(r, (t, p, d))| (r, t, p, d))
        .collect()
}

/// `plan --report DIR` drew one bar per unfolded plan while its table folds twins: Llama 3 70B
/// on two nodes listed 3 rows (#2 at ZeRO-2, "#1 also stands for zero 1") beside a figure whose
/// "#2" was the ZeRO-1 twin of #1 and whose "#3" was the table's #2. The figures now show the
/// table's rows, numbered as the table numbers them.
#[test]
fn plan_report_bars_are_the_tables_rows() {
    let dir = scratch("new-user-19", "folded");
    let out = stdout_of(&[
        "plan",
        "--model",
        "llama3-70b",
        "--nodes",
        "2",
        "--top",
        "5",
        "--report",
        dir.to_str().unwrap(),
    ]);
    assert!(out.contains("also stands for"), "no folded row:\n{out}");
    let rows = table_rows(&out);
    let svg = std::fs::read_to_string(dir.join("step_time.svg")).unwrap();
    let zero_words: Vec<String> = svg_texts(&svg)
        .into_iter()
        .filter(|t| t.starts_with("vpp "))
        .map(|t| {
            t.split(" · ")
                .find(|w| w.starts_with("ZeRO-"))
                .unwrap()
                .to_string()
        })
        .collect();
    let table_zero: Vec<String> = rows.iter().map(|r| format!("ZeRO-{}", r["zero"])).collect();
    assert_eq!(zero_words, table_zero, "figure bars against table rows");
    let bars = bars(&dir);
    assert_eq!(bars.len(), rows.len(), "{bars:?}");
    for (i, (rank, ..)) in bars.iter().enumerate() {
        assert_eq!(*rank, i + 1, "{bars:?}");
    }
}

/// `plan --save` writes the table's #1, but `report` of that file labelled it "this plan (search
/// #2)" and called another plan "#1" (DeepSeek-V3 in MXFP8 on 64 GB200 trays, an uneven
/// pipeline): the report numbered the search's closed-form order, `plan` the order after the
/// schedule simulation. The report now numbers as `plan`'s table does.
#[test]
fn the_report_of_a_saved_plan_numbers_bars_as_plan_numbers_rows() {
    let dir = scratch("new-user-19", "renumber");
    let file = dir.join("ds.yaml");
    let out = stdout_of(&[
        "plan",
        "--model",
        "deepseek-v3",
        "--gpu",
        "gb200-nvl72",
        "--nodes",
        "64",
        "--precision",
        "mxfp8",
        "--global-batch",
        "2048",
        "--allow-uneven-pp",
        "--save",
        file.to_str().unwrap(),
    ]);
    let rows = table_rows(&out);
    let report = dir.join("report");
    let r = run(&[
        "report",
        file.to_str().unwrap(),
        "--out",
        report.to_str().unwrap(),
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let bars = bars(&report);
    assert_eq!(bars[0].0, 1, "the saved plan is the table's #1: {bars:?}");
    for (rank, tp, pp, dp) in &bars {
        let row = &rows[rank - 1];
        assert_eq!(
            (row["tp"].as_str(), row["pp"].as_str(), row["dp"].as_str()),
            (
                tp.to_string().as_str(),
                pp.to_string().as_str(),
                dp.to_string().as_str()
            ),
            "bar #{rank} against the table's row #{rank}: {bars:?}"
        );
    }
}
