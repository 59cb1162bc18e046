//! `tpsim accuracy`'s JSON names what each row's `error` compares: step times for the SC'21/BLOOM
//! file (negative: tpsim faster than published), tokens/s per GPU for a current-stack runs file
//! (positive: tpsim faster). The two files' rows both say `error`, with opposite signs for the
//! same direction of miss, so a script reading both needs the name of the quantity.

mod common;

use common::json;

#[test]
fn each_accuracy_row_names_the_quantity_its_error_compares() {
    let published = json(&["accuracy", "--format", "json"]);
    let rows = published.as_array().expect("rows");
    assert!(!rows.is_empty());
    for r in rows {
        assert_eq!(r["error_of"], "step_s", "{r}");
        let (p, m) = (
            r["predicted_step_s"].as_f64().unwrap(),
            r["published_step_s"].as_f64().unwrap(),
        );
        assert!(
            (r["error"].as_f64().unwrap() - (p / m - 1.0)).abs() < 1e-12,
            "{r}"
        );
    }
    let modern = json(&[
        "accuracy",
        "--runs",
        "validation/modern_runs.yaml",
        "--format",
        "json",
    ]);
    let rows = modern.as_array().expect("rows");
    let mut checked = 0;
    for r in rows {
        assert_eq!(r["error_of"], "tokens_per_s_per_gpu", "{r}");
        if let (Some(e), Some(p), Some(m)) = (
            r["error"].as_f64(),
            r["predicted_tokens_per_s_per_gpu"].as_f64(),
            r["published_tokens_per_s_per_gpu"].as_f64(),
        ) {
            assert!((e - (p / m - 1.0)).abs() < 1e-12, "{r}");
            checked += 1;
        }
    }
    assert!(checked > 200, "only {checked} predicted rows");
}
