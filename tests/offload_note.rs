//! `plan`'s note on CPU activation offloading (Megatron-Core's `--cpu-offloading-num-layers`,
//! tpsim's `--cpu-offload-layers`), which the search prices only when asked: the note runs the
//! search again with offloading and names a plan that would rank above #1, whether or not #1
//! recomputes, at the fewest offloaded layers that keep tpsim's memory margin, with the step `eval`
//! gives that plan; it is given only on GPUs whose published runs offload (GB200/GB300), and pins
//! that rule offloading out rule the note out.

mod common;

use common::*;

/// Llama 3.1 405B on 128 GB200 at NVIDIA's 25.09 recipe scenario (64 × 8K tokens, FP8): the best
/// plan without offloading recomputes nothing, yet a lower TP degree that offloads half the layers
/// fits and is faster (the recipe itself offloads 95 layers at tp 2).
const LLAMA_405B_GB200: [&str; 14] = [
    "--model",
    "llama3-405b",
    "--gpu",
    "gb200-nvl72",
    "--nodes",
    "32",
    "--gpus-per-node",
    "4",
    "--global-batch",
    "64",
    "--seq-len",
    "8192",
    "--precision",
    "fp8",
];

fn offload_note(stdout: &str) -> Option<&str> {
    stdout
        .lines()
        .find(|l| l.starts_with("note: offloading the activations of"))
}

/// The digits (and decimal point) right after `key` in `text`.
fn number_after<'a>(text: &'a str, key: &str) -> &'a str {
    let at = text.find(key).unwrap_or_else(|| panic!("{key} in {text}")) + key.len();
    let len = text[at..]
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len() - at);
    &text[at..at + len]
}

/// The flags of the plan a note names (degrees, micro-batch, ZeRO stage, sequence parallelism), no
/// recompute, as `eval` takes them.
fn note_plan_flags(note: &str) -> Vec<&str> {
    let mut flags = vec![
        "--tp",
        number_after(note, "lets tp "),
        "--pp",
        "1",
        "--dp",
        number_after(note, " dp "),
        "--micro-batch",
        number_after(note, " mb "),
        "--zero",
        number_after(note, " ZeRO-"),
        "--recompute",
        "none",
    ];
    if note.contains(" sequence-parallel ") {
        flags.push("--sequence-parallel");
    }
    flags
}

fn plan_with(extra: &[&str]) -> Run {
    let mut args = vec!["plan"];
    args.extend(LLAMA_405B_GB200);
    args.extend(extra);
    run(&args)
}

#[test]
fn note_names_an_offloading_plan_faster_than_a_best_plan_without_recompute() {
    let r = plan_with(&[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let note = offload_note(&r.stdout).unwrap_or_else(|| panic!("no note:\n{}", r.stdout));
    let mut args = vec!["plan"];
    args.extend(LLAMA_405B_GB200);
    args.extend(["--format", "json"]);
    let best = &json(&args)["plans"][0];
    assert_eq!(best["recompute"], "none", "{best}");
    let best_s = best["time"]["step_s"].as_f64().unwrap();

    // The plan the note names, evaluated on its own, gives the note's step and memory.
    let layers = number_after(note, "add --cpu-offload-layers ");
    let mut eval = vec!["eval"];
    eval.extend(LLAMA_405B_GB200);
    eval.extend(note_plan_flags(note));
    eval.extend(["--cpu-offload-layers", layers, "--format", "json"]);
    let e = &json(&eval)["plans"][0];
    let step: f64 = number_after(note, "and take ").parse().unwrap();
    let eval_s = e["time"]["step_s"].as_f64().unwrap();
    assert!(
        (eval_s - step).abs() < 0.006,
        "note {step} s, eval {eval_s} s"
    );
    assert!(step < 0.99 * best_s, "note {step} s, #1 {best_s} s");
    let gib = |v: &serde_json::Value| v.as_f64().unwrap() / (1u64 << 30) as f64;
    // Between the two, where the plan keeps no memory margin, the note says so
    // (tests/consistency_round12.rs).
    assert!(
        note.contains(&format!(
            "fit at {:.1} of {:.1} GiB",
            gib(&e["memory"]["total_bytes"]),
            gib(&e["memory"]["capacity_bytes"]),
        )) && note.contains(&format!(
            ", with {:.1} of {:.1} GiB of host memory per GPU",
            gib(&e["memory"]["host_bytes"]),
            gib(&e["memory"]["host_capacity_bytes"]),
        )),
        "{note}\n{e}"
    );
    assert_eq!(e["memory"]["fits"], true);
    assert_eq!(e["memory"]["host_fits"], true);
    // Published runs that offload on this GPU stand behind the pricing, and the note says so.
    assert!(
        note.contains("as NVIDIA's Megatron-Bridge recipes offload on this GPU"),
        "{note}"
    );
}

/// On a GPU no published offloading run used (a DGX H100, whose PCIe host links share switch
/// uplinks and host memory bandwidth tpsim does not charge), `plan` names no offload: the 512B
/// README example would otherwise be told to offload 100 of 112 layers over PCIe. Asked for, the
/// offload is still priced.
#[test]
fn no_note_where_no_published_run_offloads() {
    for args in [
        &["plan", "--params", "512B", "--nodes", "32"][..],
        &["plan", "--model", "llama3-70b", "--nodes", "8"],
    ] {
        let r = run(args);
        assert_eq!(r.code, 0, "{}", r.stderr);
        assert!(offload_note(&r.stdout).is_none(), "{args:?}:\n{}", r.stdout);
    }
    let r = run(&[
        "plan",
        "--model",
        "llama3-70b",
        "--nodes",
        "8",
        "--cpu-offload-layers",
        "40",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("offloaded"), "{}", r.stdout);
}

/// The note offloads the fewest layers with which its plan keeps tpsim's memory margin: one layer
/// fewer and `eval` prints the memory-range warning for the same plan. Below the count the plan
/// was found at (GPT-3 175B on 64 GB200s: found at three quarters of its 96 layers, 72) and above
/// it (Llama 3.1 405B on 128 GB200s: found at half of its 126, 63, where it fits without the
/// margin).
#[test]
fn note_offloads_the_fewest_layers_that_keep_the_memory_margin() {
    let gpt3: &[&str] = &[
        "--model",
        "gpt3-175b",
        "--gpu",
        "gb200-nvl72",
        "--nodes",
        "16",
    ];
    for (scenario, found_at) in [(gpt3, 72u32), (&LLAMA_405B_GB200[..], 63)] {
        let mut plan = vec!["plan"];
        plan.extend(scenario);
        let r = run(&plan);
        let note = offload_note(&r.stdout).unwrap_or_else(|| panic!("no note:\n{}", r.stdout));
        let layers: u32 = number_after(note, "add --cpu-offload-layers ")
            .parse()
            .unwrap();
        assert_ne!(layers, found_at, "not refined: {note}");
        let eval_at = |n: u32| {
            let n = n.to_string();
            let mut args = vec!["eval"];
            args.extend(scenario);
            args.extend(note_plan_flags(note));
            args.extend(["--cpu-offload-layers", &n]);
            run(&args)
        };
        let at = eval_at(layers);
        assert_eq!(at.code, 0, "{}", at.stderr);
        assert!(!at.stdout.contains("memory range:"), "{}", at.stdout);
        let fewer = eval_at(layers - 1);
        assert!(
            fewer.code == 1 || fewer.stdout.contains("memory range: this plan needs"),
            "{} layers offloaded still keeps the margin:\n{}",
            layers - 1,
            fewer.stdout
        );
    }
}

/// Megatron-Core offloads only without a pipeline and without recompute, and only it offloads:
/// pins or a framework that rule offloading out leave no note.
#[test]
fn pins_and_frameworks_that_rule_offloading_out_leave_no_note() {
    for extra in [
        &["--pp", "2"][..],
        &["--recompute", "full"],
        &["--framework", "torchtitan"],
        &["--cpu-offload-layers", "63"],
    ] {
        let r = plan_with(extra);
        assert!(r.code == 0 || r.code == 1, "{extra:?}: {}", r.stderr);
        assert!(
            offload_note(&r.stdout).is_none(),
            "{extra:?}:\n{}",
            r.stdout
        );
    }
}
