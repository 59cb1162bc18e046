//! A sweep where nothing fits at any point writes no chart of empty panels: it says so, as
//! `plan --report` writes no report where no plan fits, and exits 1.

mod common;

use common::*;

#[test]
fn no_chart_is_written_where_nothing_fits_at_any_point() {
    let dir = scratch("sweep-chart", "nothing-fits");
    let chart = dir.join("sweep.svg");
    let r = run(&[
        "sweep",
        "--params",
        "1T",
        "--axis",
        "nodes",
        "--values",
        "20,1",
        "--global-batch",
        "1536",
        "--chart",
        chart.to_str().unwrap(),
    ]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(!chart.exists(), "a chart of empty panels was written");
    assert!(
        r.stderr.contains(&format!(
            "no chart written to {}: nothing fits at any point",
            chart.display()
        )),
        "{}",
        r.stderr
    );
    // Where a point fits, the chart is written as before.
    let r = run(&[
        "sweep",
        "--params",
        "70B",
        "--axis",
        "nodes",
        "--values",
        "8,16",
        "--global-batch",
        "512",
        "--chart",
        chart.to_str().unwrap(),
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(chart.exists(), "{}", r.stderr);
}
