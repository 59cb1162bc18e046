//! Hostile input, round 29: the commands' own flags and outputs — `sweep --chart` over points
//! given out of order and over 200 points, `sweep --format csv` at a cost under a cent, and
//! `compare` of two plan files neither of which fits.

mod common;

use common::*;

/// The blue lines a sweep chart joins its points with (`stroke-width="2"`, full opacity; the
/// error bars are drawn at opacity 0.55), each as its points' x coordinates.
fn joined_lines(svg: &str) -> Vec<Vec<f64>> {
    svg.split("<polyline")
        .skip(1)
        .map(|el| el.split('>').next().unwrap())
        .filter(|el| {
            el.contains(r##"stroke="#0000FF""##)
                && el.contains(r#"opacity="1""#)
                && el.contains(r#"stroke-width="2""#)
        })
        .map(|el| {
            let points = el
                .split("points=\"")
                .nth(1)
                .unwrap()
                .split('"')
                .next()
                .unwrap();
            points
                .split_whitespace()
                .map(|p| p.split(',').next().unwrap().parse::<f64>().unwrap())
                .collect()
        })
        .collect()
}

/// `sweep --axis nodes --values 4,1,2 --chart` joined the points in the order typed: the line ran
/// from 4 nodes back to 1 and on to 2, a zigzag over the log axis that reads as two answers at
/// one point. It joins them in the axis's order now.
#[test]
fn a_chart_joins_points_given_out_of_order_left_to_right() {
    let dir = scratch("hostile29", "chart-order");
    let r = run_in(
        &dir,
        &[
            "sweep",
            "--model",
            "llama3-8b",
            "--axis",
            "nodes",
            "--values",
            "4,1,2",
            "--chart",
            "nodes.svg",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let svg = std::fs::read_to_string(dir.join("nodes.svg")).unwrap();
    let lines = joined_lines(&svg);
    // One line per panel: throughput, MFU, free memory.
    assert_eq!(lines.len(), 3, "{lines:?}");
    for xs in &lines {
        assert_eq!(xs.len(), 3, "{xs:?}");
        assert!(
            xs.windows(2).all(|w| w[0] < w[1]),
            "not left to right: {xs:?}"
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// The point labels under a chart's x axis: (x, y, text) of each middle-anchored, top-aligned
/// text that is a number.
fn point_labels(svg: &str) -> Vec<(f64, f64, String)> {
    svg.split("<text")
        .skip(1)
        .filter(|el| el.contains(r#"text-anchor="middle""#) && el.contains(r#"dy="0.76em""#))
        .filter_map(|el| {
            let attr = |name: &str| -> f64 {
                el.split(&format!(" {name}=\""))
                    .nth(1)
                    .unwrap()
                    .split('"')
                    .next()
                    .unwrap()
                    .parse()
                    .unwrap()
            };
            let text = el.split('>').nth(1)?.split('<').next()?.trim().to_string();
            text.parse::<f64>().ok()?;
            Some((attr("x"), attr("y"), text))
        })
        .collect()
}

/// A 200-point sweep drew all 200 labels a pixel or two apart, printed over each other into one
/// black bar under every panel, and listed all 200 values in a ten-line title. Labels that would
/// overlap the one before are left out now (the points keep their markers), and the title names
/// the first values and the last.
#[test]
fn a_200_point_chart_has_labels_that_do_not_overprint() {
    let dir = scratch("hostile29", "chart-200");
    let values: Vec<String> = (1..=200).map(|i| (8 * i).to_string()).collect();
    let values = values.join(",");
    let r = run_in(
        &dir,
        &[
            "sweep",
            "--model",
            "llama3-8b",
            "--nodes",
            "1",
            "--axis",
            "global-batch",
            "--values",
            &values,
            "--chart",
            "batch.svg",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let svg = std::fs::read_to_string(dir.join("batch.svg")).unwrap();
    let labels = point_labels(&svg);
    assert!(!labels.is_empty(), "no point labels in the chart");
    let mut rows: std::collections::BTreeMap<i64, Vec<(f64, String)>> = Default::default();
    for (x, y, text) in labels {
        rows.entry(y as i64).or_default().push((x, text));
    }
    for row in rows.values_mut() {
        row.sort_by(|a, b| a.0.total_cmp(&b.0));
        assert!(row.len() < 200, "every label drawn: {}", row.len());
        // Labels are centred on their points, about 5 pixels a digit at the chart's label size.
        for pair in row.windows(2) {
            let room = 5.0 * (pair[0].1.len() + pair[1].1.len()) as f64 / 2.0;
            assert!(
                pair[1].0 - pair[0].0 >= room,
                "labels {} at x {} and {} at x {} overprint",
                pair[0].1,
                pair[0].0,
                pair[1].1,
                pair[1].0
            );
        }
    }
    // The title: two lines at most, the first three values and the last.
    let title: Vec<&str> = svg
        .split("<text")
        .skip(1)
        .filter(|el| el.contains(r#"text-anchor="start""#))
        .filter_map(|el| el.split('>').nth(1)?.split('<').next())
        .map(str::trim)
        .collect();
    assert!(title.len() <= 2, "{title:?}");
    let title = title.join(" ");
    assert!(title.contains("8, 16, 24, ..., 1600"), "{title}");
    assert!(!title.contains("1592"), "{title}");
    let png = dir.join("batch.png");
    if let Ok(out) = std::process::Command::new("rsvg-convert")
        .arg(dir.join("batch.svg"))
        .arg("-o")
        .arg(&png)
        .output()
    {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// `sweep --format csv` printed the cost to train in whole dollars: `--tokens 1
/// --price-per-gpu-hour 0.001` cost "$0.000329" in the table and "0" in the CSV, and the time to
/// train a fraction of a second was "0" where it was under a second. Both keep their digits now.
#[test]
fn csv_cost_under_a_dollar_is_not_rounded_to_zero() {
    let scenario = [
        "sweep",
        "--model",
        "llama3-8b",
        "--axis",
        "nodes",
        "--values",
        "2",
        "--tokens",
        "1",
        "--price-per-gpu-hour",
        "0.001",
    ];
    let table = run(&scenario);
    assert_eq!(table.code, 0, "{}", table.stderr);
    let row = table.stdout.lines().find(|l| l.contains("tp")).unwrap();
    let cost_cell = row
        .split(['│', '┆'])
        .map(str::trim)
        .rfind(|c| c.starts_with('$'))
        .unwrap_or_else(|| panic!("no cost cell: {row}"));
    let table_cost: f64 = cost_cell.trim_start_matches('$').parse().unwrap();
    assert!(table_cost > 0.0, "{row}");

    let mut csv_args = scenario.to_vec();
    csv_args.extend(["--format", "csv"]);
    let csv = run(&csv_args);
    assert_eq!(csv.code, 0, "{}", csv.stderr);
    let lines: Vec<&str> = csv.stdout.lines().collect();
    let header: Vec<&str> = lines[0].split(',').collect();
    let cells: Vec<String> = csv_cells(lines[1]);
    let cell = |name: &str| -> f64 {
        let i = header.iter().position(|h| *h == name).unwrap();
        cells[i].parse().unwrap()
    };
    let csv_cost = cell("cost_to_train");
    assert!(csv_cost > 0.0, "cost 0 in the CSV: {}", lines[1]);
    // The table's cost, to the digits it shows.
    assert!(
        (csv_cost - table_cost).abs() <= table_cost * 0.01,
        "table {table_cost}, CSV {csv_cost}"
    );
    assert!(cell("time_to_train_s") > 0.0, "{}", lines[1]);
}

/// `compare --plan a.yaml --plan b.yaml` where neither plan fits printed "neither plan fits" and
/// exited 0, as if both ran; `eval` and `report` of either file exit 1 (valid input, nothing
/// fits), as `compare` of a search where nothing fits does. It exits 1 now, the table printed.
#[test]
fn compare_of_two_plans_neither_of_which_fits_exits_1() {
    let dir = scratch("hostile29", "compare-neither");
    let plan = |recompute: &str| {
        format!(
            "model: gpt3-175b\ngpu: a100-sxm-80g\nnodes: 1\nseq_len: 2048\nglobal_batch: 1536\nplan:\n  tp: 8\n  pp: 1\n  dp: 1\n  micro_batch: 1\n  recompute: {recompute}\n"
        )
    };
    std::fs::write(dir.join("a.yaml"), plan("none")).unwrap();
    std::fs::write(dir.join("b.yaml"), plan("full")).unwrap();
    for file in ["a.yaml", "b.yaml"] {
        let r = run_in(&dir, &["eval", "--plan", file]);
        assert_eq!(r.code, 1, "eval {file}: {}", r.stderr);
    }
    for format in ["table", "json"] {
        let r = run_in(
            &dir,
            &[
                "compare", "--plan", "a.yaml", "--plan", "b.yaml", "--format", format,
            ],
        );
        assert_eq!(r.code, 1, "{format}: {}\n{}", r.stdout, r.stderr);
        assert!(!r.stdout.is_empty(), "{format}: nothing printed");
        if format == "table" {
            assert!(r.stdout.contains("neither plan fits"), "{}", r.stdout);
        }
    }
    // One that fits beside one that does not is a comparison with an answer: exit 0.
    std::fs::write(
        dir.join("c.yaml"),
        plan("full")
            .replace("nodes: 1", "nodes: 16")
            .replace("pp: 1", "pp: 16"),
    )
    .unwrap();
    let r = run_in(&dir, &["eval", "--plan", "c.yaml"]);
    assert_eq!(r.code, 0, "c.yaml should fit: {}", r.stderr);
    std::fs::write(
        dir.join("d.yaml"),
        plan("none")
            .replace("nodes: 1", "nodes: 16")
            .replace("pp: 1", "pp: 16"),
    )
    .unwrap();
    let r = run_in(&dir, &["compare", "--plan", "c.yaml", "--plan", "d.yaml"]);
    assert!(r.code == 0, "{}\n{}", r.stdout, r.stderr);
    let _ = std::fs::remove_dir_all(dir);
}

/// `sweep --help` listed six axes in its summary and its "Axes and their values" block, not
/// `cpu-offload-layers`; `--cpu-offload-layers`'s help named a Megatron-LM `--cpu-offloading`
/// switch that tpsim itself refuses in a pasted line (Megatron-LM has none).
#[test]
fn help_names_the_offload_axis_and_no_cpu_offloading_switch() {
    let r = run(&["sweep", "--help"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let axes = &r.stdout[r.stdout.find("Axes and their values:").unwrap()..];
    assert!(
        axes.contains("--axis cpu-offload-layers --values"),
        "{axes}"
    );
    let r = run(&["plan", "--help"]);
    assert!(!r.stdout.contains("--cpu-offloading --cpu"), "{}", r.stdout);
}
