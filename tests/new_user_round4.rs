//! Regressions from the fourth review of valid usage by a new user: the README's first screen and
//! every example, then `plan`, `eval` of the plan it recommends, `compare`, `sweep`, `report`,
//! `--emit` and `accuracy`, looking for one quantity printed with two numbers, words the numbers
//! beside them contradict, and emitted configurations that do not read back (each test names the
//! finding it guards).

mod common;
use common::{json, run};
use serde_json::Value;

fn readme() -> String {
    std::fs::read_to_string(format!("{}/README.md", common::ROOT)).unwrap()
}

/// The README's prose between `from` and `to`, its line breaks folded into spaces.
fn prose(from: &str, to: &str) -> String {
    let readme = readme();
    let start = readme
        .find(from)
        .unwrap_or_else(|| panic!("README: no {from:?}"));
    let rest = &readme[start..];
    let end = rest.find(to).unwrap_or_else(|| panic!("README: no {to:?}"));
    rest[..end].split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The sweep paragraph said "7.7× faster here (45.52 s to 5.95 s per step) for 5% more money: the
/// best layout stays TP 8 × PP 8 with 12 interleaved chunks per stage and only the data-parallel
/// degree grows, so MFU falls slowly, from 58.0% to 55.4%", under a table whose last row is
/// 5.84 s and 56.5% with TP 4, after a 64-node row with PP 4 and 24 chunks. Every number and
/// layout the paragraph names is now the sweep's.
#[test]
fn readme_sweep_paragraph_quotes_the_sweep_above_it() {
    let text = prose("Eight times the GPUs", "### Compare");
    let sweep = json(&[
        "sweep",
        "--params",
        "175B",
        "--axis",
        "nodes",
        "--values",
        "16,32,64,128",
        "--tokens",
        "300B",
        "--price-per-gpu-hour",
        "2.5",
        "--format",
        "json",
    ]);
    let rows = sweep["rows"].as_array().unwrap();
    let (first, last) = (&rows[0], &rows[rows.len() - 1]);
    let num = |row: &Value, key: &str| row[key].as_f64().unwrap();
    let step = |row: &Value| row["time"]["step_s"].as_f64().unwrap();
    let (s0, s1) = (step(first), step(last));
    let speedup = format!(
        "{:.1}× faster here ({s0:.2} s to {s1:.2} s per step)",
        s0 / s1
    );
    assert!(text.contains(&speedup), "want {speedup:?} in: {text}");
    let more_money = 100.0 * (num(last, "cost_to_train") / num(first, "cost_to_train") - 1.0);
    let money = format!("for {more_money:.0}% more money");
    assert!(text.contains(&money), "want {money:?} in: {text}");
    let mfu = format!(
        "from {:.1}% to {:.1}%",
        100.0 * num(first, "mfu"),
        100.0 * num(last, "mfu")
    );
    assert!(text.contains(&mfu), "want {mfu:?} in: {text}");
    // Each point's layout, named once per run of points that share it ("at 16 and 32 nodes").
    for row in rows {
        let layout = format!("TP {} × PP {} with {}", row["tp"], row["pp"], row["vpp"]);
        let nodes = row["value"].as_str().unwrap();
        let named = text.split("TP ").any(|piece| {
            format!("TP {piece}")
                .strip_prefix(&layout)
                .is_some_and(|rest| {
                    rest.split(|c: char| !c.is_ascii_digit())
                        .any(|w| w == nodes)
                })
        });
        assert!(named, "want {layout:?} at {nodes} nodes in: {text}");
    }
    assert!(!text.contains("stays"), "{text}");
}

/// The Qwen3-235B paragraph said the ZeRO-2 plan's "memory is at the edge, 184.5 of 185 GiB"
/// above a table that prints 183.0/185.0 for it.
#[test]
fn readme_qwen3_paragraph_quotes_the_memory_its_table_prints() {
    let text = prose("Qwen3-235B-A22B on 256 GB200", "<!-- output of:");
    let planned = json(&[
        "plan",
        "--model",
        "qwen3-235b-a22b",
        "--gpu",
        "gb200-nvl72",
        "--nodes",
        "64",
        "--gpus-per-node",
        "4",
        "--global-batch",
        "2048",
        "--seq-len",
        "4096",
        "--top",
        "3",
        "--format",
        "json",
    ]);
    let plans = planned["plans"].as_array().unwrap();
    let gib = |p: &Value, key: &str| p["memory"][key].as_f64().unwrap() / f64::from(1u32 << 30);
    let zero2 = &plans[0];
    assert_eq!(
        (zero2["zero"].as_u64(), zero2["ep"].as_u64()),
        (Some(2), Some(32))
    );
    let edge = format!(
        "its memory is at the edge, {:.1} of {:.0} GiB",
        gib(zero2, "total_bytes"),
        gib(zero2, "capacity_bytes")
    );
    assert!(text.contains(&edge), "want {edge:?} in: {text}");
    let zero3 = plans
        .iter()
        .find(|p| p["zero"] == 3 && p["ep"] == 4)
        .expect("the ZeRO-3 plan with experts inside a tray");
    let step = |p: &Value| p["time"]["step_s"].as_f64().unwrap();
    let tie = format!(
        "tie within {:.1}%",
        100.0 * (step(zero3) / step(zero2) - 1.0)
    );
    assert!(text.contains(&tie), "want {tie:?} in: {text}");
}

/// The DeepSeek-V3 paragraph said the uneven pipeline takes "7.4 s against 9.0 s"; the two tables
/// print 7.45 and 9.03 (`eval`: 7.451 s), which read 7.5 s and 9.0 s.
#[test]
fn readme_deepseek_paragraph_rounds_the_steps_its_tables_print() {
    let text = prose("The note above is worth taking", "<!-- output of:");
    let step = |uneven: bool| {
        let mut args = vec![
            "plan",
            "--model",
            "deepseek-v3",
            "--gpu",
            "h100-sxm-80g",
            "--nodes",
            "256",
            "--global-batch",
            "4096",
            "--top",
            "1",
            "--format",
            "json",
        ];
        if uneven {
            args.push("--allow-uneven-pp");
        }
        json(&args)["plans"][0]["time"]["step_s"].as_f64().unwrap()
    };
    let words = format!("({:.1} s against {:.1} s)", step(true), step(false));
    assert!(text.contains(&words), "want {words:?} in: {text}");
}

/// Under the Megatron-LM launch line the README described the fastest plan of the same job as
/// "TP 8, PP 2, 20 interleaved chunks, two sequences per micro-batch"; `plan` picks 10 chunks.
#[test]
fn readme_launch_line_paragraph_names_the_plan_plan_picks() {
    let text = prose("The script's plan takes", "### Configs out");
    let best = json(&[
        "plan",
        "--model",
        "llama3-70b",
        "--nodes",
        "16",
        "--global-batch",
        "512",
        "--top",
        "1",
        "--format",
        "json",
    ]);
    let p = &best["plans"][0];
    let sequences = match p["micro_batch"].as_u64().unwrap() {
        1 => "one sequence".to_string(),
        2 => "two sequences".to_string(),
        n => format!("{n} sequences"),
    };
    let words = format!(
        "(TP {}, PP {}, {} interleaved chunks, {sequences} per micro-batch)",
        p["tp"], p["pp"], p["vpp"]
    );
    assert!(text.contains(&words), "want {words:?} in: {text}");
}

/// The accuracy section said torchtitan's stated peak memory is matched with a "median error
/// 4.4%", while `tpsim accuracy --runs validation/modern_runs.yaml`, whose last lines the README
/// prints just above, says 4.3% for the same 20 runs; and it put DeepSeek-V3 on 1,024 H100s at
/// +27% where the command prints +28.9%.
#[test]
fn readme_accuracy_prose_quotes_what_accuracy_prints() {
    let text = prose(
        "The Megatron-Core family (DGX recipes",
        "**A run in no validation file.**",
    );
    let runs = json(&[
        "accuracy",
        "--runs",
        "validation/modern_runs.yaml",
        "--format",
        "json",
    ]);
    let runs = runs.as_array().unwrap();
    let mut memory: Vec<f64> = runs
        .iter()
        .filter(|r| r["source"] == "torchtitan")
        .filter_map(|r| r["memory_error"].as_f64())
        .map(|e| 100.0 * e.abs())
        .collect();
    memory.sort_by(f64::total_cmp);
    let n = memory.len();
    let median = if n % 2 == 1 {
        memory[n / 2]
    } else {
        (memory[n / 2 - 1] + memory[n / 2]) / 2.0
    };
    let within = memory.iter().filter(|&&e| e <= 10.0).count();
    let words = format!("within 10% for {within} of {n} runs (median error {median:.1}%)");
    assert!(text.contains(&words), "want {words:?} in: {text}");
    let deepseek: Vec<String> = runs
        .iter()
        .filter(|r| {
            r["source"] == "mbridge" && r["id"].as_str().unwrap().contains("deepseek_v3-h100-1024g")
        })
        .map(|r| format!("{:+.0}%", 100.0 * r["error"].as_f64().unwrap()))
        .collect();
    assert!(!deepseek.is_empty());
    for error in deepseek {
        let words = format!("DeepSeek-V3 on 1,024 H100s {error}");
        assert!(text.contains(&words), "want {words:?} in: {text}");
    }
}

/// The DP line of the eval breakdown.
fn dp_line(stdout: &str) -> String {
    stdout
        .lines()
        .find(|l| l.trim_start().starts_with("DP ") && l.contains(" GB on "))
        .unwrap_or_else(|| panic!("no DP traffic line in:\n{stdout}"))
        .to_string()
}

/// `eval` of the README's own flag example (GPT-3 175B, ZeRO-0) described its DP traffic as
/// "gradient reduction and parameter all-gather (ZeRO)": a ZeRO-0 plan gathers no parameters
/// (its time lines have no "DP param gather", and the ledger one all-reduce). The line now names
/// the collectives the plan's ZeRO stage runs.
#[test]
fn eval_dp_line_names_the_collectives_of_the_plans_zero_stage() {
    let base = [
        "eval",
        "--model",
        "gpt3-175b",
        "--gpu",
        "a100-sxm-80g",
        "--nodes",
        "128",
        "--tp",
        "8",
        "--pp",
        "16",
        "--micro-batch",
        "1",
        "--recompute",
        "full",
        "--global-batch",
        "1536",
    ];
    let zero0 = run(&base);
    assert_eq!(zero0.code, 0, "{}", zero0.stderr);
    assert!(
        !zero0.stdout.contains("DP param gather"),
        "{}",
        zero0.stdout
    );
    let line = dp_line(&zero0.stdout);
    assert!(line.contains("all-reduce"), "{line}");
    assert!(!line.contains("parameter all-gather"), "{line}");
    for (zero, words) in [
        (
            "1",
            "reduce-scatter and all-gather of the updated weights (ZeRO-1)",
        ),
        ("3", "all-gathers of the sharded weights (ZeRO-3)"),
    ] {
        let r = run(&[&base[..], &["--zero", zero]].concat());
        assert_eq!(r.code, 0, "{}", r.stderr);
        let line = dp_line(&r.stdout);
        assert!(line.contains(words), "ZeRO-{zero}: {line}");
    }
}

/// (step seconds, parameters, bytes on the most loaded GPU) of a `--format json` run's plan #1.
fn step_params_memory(v: &Value) -> (f64, f64, f64) {
    let p = &v["plans"][0];
    (
        p["time"]["step_s"].as_f64().unwrap(),
        v["model"]["params"].as_f64().unwrap(),
        p["memory"]["total_bytes"].as_f64().unwrap(),
    )
}

/// The README reads an emitted Megatron-LM line back by pasting it on `eval`
/// (`tpsim eval --nodes 16 $(tpsim plan ... --emit megatron)`), but for GPT-OSS and Mistral the
/// line's `--window-size '(127,0)'`, for Qwen3 its `--qk-layernorm`, for Qwen2.5 and GLM-4.5 its
/// `--add-qkv-bias` and for Qwen1.5-MoE its `--moe-shared-expert-gate` made `eval` exit 2
/// ("unexpected argument"). Each line now pastes and reads back to the plan it was written for.
#[test]
fn emitted_megatron_lines_paste_back_on_eval() {
    for model in [
        ["--model", "gpt-oss-20b"],
        ["--model", "qwen3-30b-a3b"],
        ["--hf-config", "models/hf/qwen2.5-7b.json"],
        ["--hf-config", "models/hf/qwen1.5-moe-a2.7b.json"],
    ] {
        let job = [
            &["plan"][..],
            &model[..],
            &["--nodes", "4", "--global-batch", "256"],
        ]
        .concat();
        let emitted = run(&[&job[..], &["--emit", "megatron"]].concat());
        assert_eq!(emitted.code, 0, "{model:?}: {}", emitted.stderr);
        let line = emitted.stdout.trim();
        let mut pasted = vec!["eval", "--nodes", "4", "--format", "json"];
        // As the shell's $(...) splits it: the single quotes stay on the words they wrap.
        pasted.extend(line.split_whitespace());
        let back = run(&pasted);
        assert_eq!(back.code, 0, "{model:?}: {line}\n{}", back.stderr);
        let back: Value = serde_json::from_str(&back.stdout).unwrap();
        let planned = json(&[&job[..], &["--top", "1", "--format", "json"]].concat());
        let (a, b) = (step_params_memory(&planned), step_params_memory(&back));
        for (what, x, y) in [
            ("step", a.0, b.0),
            ("params", a.1, b.1),
            ("memory", a.2, b.2),
        ] {
            assert!(
                (x - y).abs() <= 1e-9 * x.abs(),
                "{model:?}: {what} {x} planned, {y} read back from {line}"
            );
        }
    }
}

/// `--window-size` and `--moe-shared-expert-gate` pasted on `eval` are read as
/// `--megatron-args` reads them: a non-causal window is refused, a gate needs shared experts.
#[test]
fn pasted_megatron_model_switches_are_checked_as_launch_lines_are() {
    let base = [
        "eval",
        "--nodes",
        "1",
        "--layers",
        "4",
        "--hidden",
        "1024",
        "--heads",
        "8",
        "--global-batch",
        "8",
        "--tp",
        "1",
        "--pp",
        "1",
    ];
    let r = run(&[&base[..], &["--window-size", "(127,4)"]].concat());
    common::assert_one_line_error(&r, &["--window-size (127,4)", "not causal"], &[], "window");
    let r = run(&[
        &base[..],
        &["--window-size", "'(127,0)'", "--format", "json"],
    ]
    .concat());
    assert_eq!(r.code, 0, "{}", r.stderr);
    let r = run(&[&base[..], &["--moe-shared-expert-gate"]].concat());
    common::assert_one_line_error(
        &r,
        &["--moe-shared-expert-gate", "no shared experts"],
        &[],
        "gate",
    );
}
