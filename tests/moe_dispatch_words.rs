//! The training line describes the MoE token dispatch only where a shown plan splits its
//! experts (ep > 1): at ep 1 every token's experts are on its own GPU and nothing is dispatched.

mod common;

use common::*;

fn training_line(extra: &[&str]) -> String {
    let mut args = vec![
        "plan",
        "--model",
        "qwen3-235b-a22b",
        "--gpu",
        "gb200-nvl72",
        "--nodes",
        "64",
        "--gpus-per-node",
        "4",
    ];
    args.extend(extra);
    let r = run(&args);
    assert_eq!(r.code, 0, "{}", r.stderr);
    r.stdout
        .lines()
        .find(|l| l.starts_with("training:"))
        .unwrap_or_else(|| panic!("no training line:\n{}", r.stdout))
        .to_string()
}

#[test]
fn plans_at_ep_1_name_no_dispatch() {
    let at_ep_1 = training_line(&["--ep", "1"]);
    assert!(!at_ep_1.contains("MoE dispatch"), "{at_ep_1}");
    let searched = training_line(&[]);
    assert!(
        searched.contains("MoE dispatch: all-to-all, a copy per routed expert"),
        "{searched}"
    );
}
