//! Regressions from the twenty-sixth review of valid usage by a new user: an ML infrastructure
//! engineer about to bet a month of cluster time follows the README's first screen, then a team
//! plans long-context continued pretraining of Llama 3 70B at 128K tokens on 256 H100 under
//! Megatron-Core and torchtitan (context parallelism, `--emit megatron`, `--emit torchtitan`),
//! compares two saved plans with `compare`, `eval` and `report`, plans Qwen3-30B-A3B and
//! DeepSeek-V3 (total and active parameters, EP, the all-to-all's link and bytes), reads
//! `plan --help`, and opens `report`'s page and figures (each test names the finding).

mod common;
use common::{run, scratch};

/// `report`'s HTML escaping (`report::html::escape`), to find a printed line in the page.
fn escaped(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Finding: `eval --plan FILE` ends with the plan's `range:` line (121.65–146.44 s per step for
/// Llama 3 70B at 128K tokens on 256 H100) and its `memory range:` line (75.9 GiB, 89.8 GiB at
/// the high end of tpsim's memory error, `--max-memory-gib 67.3` keeps the margin), but
/// `report FILE`'s index.html, the page a reviewer reads before booking the cluster, gave
/// neither number: the step's range was only an unlabelled box in step_time.svg and the memory
/// range appeared nowhere. The page now carries both lines as `eval` prints them.
#[test]
fn report_page_states_the_step_and_memory_ranges_eval_prints() {
    let dir = scratch("new_user_round26", "ranges");
    let plan = dir.join("llama3-70b-128k.yaml");
    let plan = plan.to_str().unwrap();
    let saved = run(&[
        "plan",
        "--model",
        "llama3-70b",
        "--seq-len",
        "131072",
        "--nodes",
        "32",
        "--global-batch",
        "128",
        "--top",
        "1",
        "--save",
        plan,
    ]);
    assert_eq!(saved.code, 0, "{}", saved.stderr);
    let seed = format!("{}/plans/seed-512b-32nodes.yaml", common::ROOT);
    for (file, want_memory_line) in [(plan, true), (seed.as_str(), false)] {
        let eval = run(&["eval", "--plan", file]);
        assert_eq!(eval.code, 0, "{file}: {}", eval.stderr);
        let lines: Vec<&str> = eval
            .stdout
            .lines()
            .filter(|l| l.starts_with("range: ") || l.starts_with("memory range: "))
            .collect();
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("range: this plan takes ")),
            "{file}: eval prints no range line: {}",
            eval.stdout
        );
        assert_eq!(
            lines.iter().any(|l| l.starts_with("memory range: ")),
            want_memory_line,
            "{file}: eval's memory range line: {lines:?}"
        );
        let out = dir.join(format!("report-{want_memory_line}"));
        let report = run(&["report", file, "--out", out.to_str().unwrap()]);
        assert_eq!(report.code, 0, "{file}: {}", report.stderr);
        let html = std::fs::read_to_string(out.join("index.html")).expect("index.html");
        for line in &lines {
            assert!(
                html.contains(&escaped(line)),
                "{file}: report's index.html lacks eval's line {line:?}"
            );
        }
    }
}

/// Finding: `plan --help` (and `eval`, `sweep`, `compare`) gave five shape flags a default that
/// holds only for shape flags: `--moe-router-topk` "default 2, Megatron's", `--kv-heads`
/// "default: --heads", `--ffn-hidden` "default: 4 x --hidden", `--head-dim` "default hidden /
/// heads", `--moe-ffn-hidden-size` "default --ffn-hidden-size". Over a bundled model the model's
/// value is kept: `--model deepseek-v3 --num-experts 64` still routes each token to 8 experts,
/// `--model qwen3-30b-a3b --heads 8` keeps 4 KV heads and head dim 128, `--model llama3-70b --hidden 4096` keeps
/// ffn 28672. Each now says "Default: the model's", as `--moe-layer-freq` already did, and the
/// model line shows the model's value kept.
#[test]
fn shape_flag_defaults_say_a_bundled_model_keeps_its_own_value() {
    for command in ["plan", "eval", "sweep", "compare"] {
        let help = run(&[command, "--help"]).stdout;
        for flag in [
            "moe-router-topk <",
            "kv-heads <",
            "ffn-hidden <",
            "head-dim <",
            "moe-ffn-hidden-size <",
        ] {
            let entry = help
                .split("\n      --")
                .find(|e| e.starts_with(flag))
                .unwrap_or_else(|| panic!("no --{flag} in {command} --help"));
            let flat = entry.split_whitespace().collect::<Vec<_>>().join(" ");
            assert!(
                flat.contains("Default: the model's;") && flat.contains("with shape flags"),
                "{command} --help, --{flag}: the default must name the model's value first: {flat}"
            );
        }
    }
    // What the help now says, as the model line shows it.
    for (args, kept) in [
        (
            &[
                "--model",
                "deepseek-v3",
                "--num-experts",
                "64",
                "--nodes",
                "8",
                "--ep",
                "8",
            ][..],
            "64 experts (top-8 ",
        ),
        (
            &["--model", "qwen3-30b-a3b", "--heads", "8", "--nodes", "1"][..],
            "8 heads, 4 KV heads, head dim 128,",
        ),
        (
            &[
                "--model",
                "llama3-70b",
                "--hidden",
                "4096",
                "--heads",
                "32",
                "--nodes",
                "1",
            ][..],
            "hidden 4096, 32 heads, 8 KV heads, ffn 28672,",
        ),
    ] {
        let mut full = vec!["eval", "--tp", "8", "--global-batch", "64"];
        full.extend_from_slice(args);
        let r = run(&full);
        let model = r
            .stdout
            .lines()
            .find(|l| l.starts_with("model "))
            .unwrap_or_else(|| panic!("{full:?}: no model line: {} {}", r.stdout, r.stderr));
        assert!(model.contains(kept), "{full:?}: want {kept:?} in {model}");
    }
}
