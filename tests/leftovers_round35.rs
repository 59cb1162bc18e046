//! Leftovers, round 35 (the lead's, from hostile round 51's notes): `report --out DIR/` and
//! `plan --report DIR/` said "wrote DIR//index.html", a path with a doubled slash the user never
//! typed; the path is now joined as a path (`DIR/index.html`).
//! - `plan --save FILE` onto a plan tpsim saved there before, and `report --out DIR` onto an
//!   earlier report, replaced it and said only "saved"/"wrote" (hostile round 51's note): both say
//!   now that they replaced tpsim's earlier output (tpsim replaces only its own; a foreign file is
//!   refused, as before).

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

#[test]
fn replacing_an_earlier_output_says_so() {
    let dir = scratch("leftovers35", "replace");
    let saved = dir.join("best.yaml");
    let saved = saved.to_str().unwrap();
    let out = dir.join("r");
    let out = out.to_str().unwrap();
    let args = |save: &str, report: &str| {
        run(&[
            "plan", "--params", "7B", "--nodes", "1", "--top", "1", "--save", save, "--report",
            report,
        ])
    };
    let first = args(saved, out);
    assert_eq!(first.code, 0, "{}", first.stderr);
    assert!(!first.stderr.contains("replacing"), "{}", first.stderr);
    let second = args(saved, out);
    assert_eq!(second.code, 0, "{}", second.stderr);
    assert!(
        second.stderr.contains(&format!(
            "saved the best plan to {saved}, replacing the plan tpsim wrote there before"
        )),
        "{}",
        second.stderr
    );
    assert!(
        second
            .stderr
            .contains("more files, replacing the report tpsim wrote there before"),
        "{}",
        second.stderr
    );
}
