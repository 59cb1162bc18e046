//! Leftovers, round 35 (the lead's, from hostile round 51's notes): `report --out DIR/` and
//! `plan --report DIR/` said "wrote DIR//index.html", a path with a doubled slash the user never
//! typed; the path is now joined as a path (`DIR/index.html`).

mod common;

use common::*;

#[test]
fn a_report_folder_with_a_trailing_slash_is_named_without_a_doubled_one() {
    let dir = scratch("leftovers35", "slash");
    let out = format!("{}/", dir.join("r").display());
    let report = run(&["report", "plans/seed-512b-32nodes.yaml", "--out", &out]);
    assert_eq!(report.code, 0, "{}", report.stderr);
    let plan = run(&[
        "plan", "--params", "7B", "--nodes", "1", "--top", "1", "--report", &out,
    ]);
    assert_eq!(plan.code, 0, "{}", plan.stderr);
    for r in [&report, &plan] {
        let wrote = r
            .stderr
            .lines()
            .find(|l| l.starts_with("wrote "))
            .unwrap_or_else(|| panic!("no wrote line: {}", r.stderr));
        assert!(
            wrote.contains(&format!("{out}index.html")) && !wrote.contains("//index.html"),
            "{wrote}"
        );
    }
}
