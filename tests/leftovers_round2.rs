//! Regressions from the second round of review leftovers: one quantity printed by two commands
//! (or two lines of one) under one name, one number, one rounding and one unit (each test names
//! what was printed before).

mod common;
use common::run;

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
