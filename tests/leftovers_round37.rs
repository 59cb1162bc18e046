//! Leftovers, round 37: what this session's new-user and hostile rounds left undone.
//! 1. `compare` printed no ranges: "plan A is 7.2% faster than plan B" with no step or tokens/s
//!    range and no word on whether the gap is inside tpsim's error, which `plan` says. It now
//!    prints each plan's range on the band `eval --plan` uses (`uncertainty::band_for`,
//!    `interval`; the basis in `uncertainty::band_words`, which `within_error_line` now shares)
//!    and whether the slower plan's range reaches the faster's (`within_error_of_best`); the
//!    JSON carries them as `ranges`.
//! 2. `report`'s memory.svg drew no memory range while step_time.svg drew the step's as a box: it
//!    now draws each plan's 5th–95th percentile of tpsim's peak-memory error the same way, its top
//!    `memory_margin::total_bytes_high` (the JSON's `memory.total_bytes_high`, the page's "memory
//!    range" line), its bottom `memory_margin::total_bytes_low`.
//! 3. An MoE plan at EP 1 never said EP: `plan --model qwen3-30b-a3b --nodes 2` chose ep 1 and
//!    neither `eval`'s plan line nor "why the best plan" named expert parallelism. The why-lines
//!    now have "EP 1: no expert parallelism; ..." with the fastest plan with EP > 1 the search
//!    found, its step and what its all-to-alls cost; `eval`'s plan line names ep 1 x etp 1.
//! 4. `moe.experts: 4294967296` was told it exceeds "4294967295, the largest whole number
//!    experts takes", which `Model::check` refuses too: a model count past its number type is now
//!    told the check's own bound (`model::shape_bound`, 16384 experts) with a value that passes.
//! 5. `--emit deepspeed` took `--framework deepspeed` by itself (with a note) while `--emit
//!    torchtitan` refused and asked for `--framework torchtitan`: both now take their framework
//!    when none is given, said in a note (never silently), in `eval` and `plan`; a framework the
//!    user gave is kept and still refused.
//! 6. A `--gpu FILE` whose `name:` is a bundled GPU's (`h100-sxm-80g` with GB200 numbers) was
//!    shown under that name: the cluster line (and the JSON's `cluster.gpu_file`) now says it is
//!    the file's profile and which numbers differ from the bundled one. (Refusing the clash
//!    would have broken the many profile tests that edit a copy of a bundled file.)

mod common;

use common::*;

/// The "X–Y s per step" after "takes " in a range line, for the plan named before it.
fn step_range(text: &str, who: &str) -> String {
    let at = text
        .find(&format!("{who} takes "))
        .unwrap_or_else(|| panic!("no range of {who} in: {text}"));
    text[at + who.len() + 7..]
        .split(" s per step")
        .next()
        .unwrap()
        .to_string()
}

#[test]
fn compare_gives_each_plan_the_range_eval_gives_it_and_says_if_the_gap_is_inside_it() {
    let (seed, best) = (
        "plans/seed-512b-32nodes.yaml",
        "plans/best-512b-32nodes.yaml",
    );
    let table = run(&["compare", "--plan", seed, "--plan", best]);
    assert_eq!(table.code, 0, "{}", table.stderr);
    let line = table
        .stdout
        .lines()
        .find(|l| l.starts_with("range: "))
        .unwrap_or_else(|| panic!("compare printed no range line:\n{}", table.stdout));
    for (file, label) in [(seed, "plan A"), (best, "plan B")] {
        let eval = run(&["eval", "--plan", file]);
        assert_eq!(eval.code, 0, "{}", eval.stderr);
        assert_eq!(
            step_range(line, label),
            step_range(&eval.stdout, "this plan"),
            "{label}: compare's range is not eval's"
        );
    }
    assert!(
        line.contains("5th–95th percentile of tpsim's error on ")
            && (line.contains("within the model's error")
                || line.contains("beyond the model's error")),
        "{line}"
    );
    // The JSON carries the same numbers as `eval --format json`'s time.step_s_low/high.
    let c = json(&[
        "compare", "--plan", seed, "--plan", best, "--format", "json",
    ]);
    for (file, side) in [(seed, "a"), (best, "b")] {
        let e = json(&["eval", "--plan", file, "--format", "json"]);
        let time = &e["plans"][0]["time"];
        let range = &c["ranges"][side];
        assert_eq!(range["step_s_low"], time["step_s_low"], "{side}");
        assert_eq!(range["step_s_high"], time["step_s_high"], "{side}");
        assert_eq!(
            range["tokens_per_s_low"], e["plans"][0]["tokens_per_s_low"],
            "{side}"
        );
    }
    assert!(c["ranges"]["within_error"].is_boolean(), "{}", c["ranges"]);
}

/// The hollow black boxes of a figure (the ranges): (y of the top, y of the bottom) in pixels.
fn range_boxes(svg: &str) -> Vec<(f64, f64)> {
    let attr = |r: &str, name: &str| -> f64 {
        r.split(&format!(" {name}=\""))
            .nth(1)
            .and_then(|v| v.split('"').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in <rect{r}"))
    };
    svg.lines()
        .flat_map(|l| l.split("<rect").skip(1))
        .filter(|r| r.contains("fill=\"none\"") && r.contains("stroke=\"#000000\""))
        .map(|r| (attr(r, "y"), attr(r, "y") + attr(r, "height")))
        .collect()
}

#[test]
fn the_memory_figure_draws_each_plans_memory_range_as_the_step_figure_draws_its_step() {
    let dir = scratch("leftovers37", "memory-range");
    let out = dir.join("report");
    let r = run(&[
        "plan",
        "--params",
        "70B",
        "--nodes",
        "4",
        "--report",
        out.to_str().unwrap(),
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let svg = std::fs::read_to_string(out.join("memory.svg")).unwrap();
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    let plans = report["plans"].as_array().unwrap();
    let boxes = range_boxes(&svg);
    assert_eq!(boxes.len(), plans.len(), "one memory range box per plan");
    assert!(
        svg.contains("range: 5th–95th percentile"),
        "no legend entry"
    );
    // The y axis's zero: the lowest tick mark (`points="76,Y 81,Y "`).
    let zero = svg
        .split("points=\"76,")
        .skip(1)
        .filter_map(|p| p.split(' ').next()?.parse::<f64>().ok())
        .fold(0.0, f64::max);
    // Each box's top is the plan's memory.total_bytes_high (what `eval` and the page's memory
    // range line give), on one pixel scale for every plan; its bottom lies below the plan's memory.
    let scales: Vec<f64> = plans
        .iter()
        .zip(&boxes)
        .map(|(p, &(top, bottom))| {
            let m = &p["memory"];
            let (total, high) = (
                m["total_bytes"].as_f64().unwrap(),
                m["total_bytes_high"].as_f64().unwrap(),
            );
            let scale = (zero - top) / high;
            assert!(
                zero - bottom < total * scale && high > total,
                "box {top}–{bottom} px against {total} and {high} bytes"
            );
            scale
        })
        .collect();
    for s in &scales {
        assert!(
            (s / scales[0] - 1.0).abs() < 0.01,
            "box tops are not the plans' total_bytes_high: {scales:?}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_moe_plan_at_ep_1_says_expert_parallelism_was_weighed() {
    let dir = scratch("leftovers37", "ep1");
    let saved = dir.join("qwen.yaml");
    let r = run(&[
        "plan",
        "--model",
        "qwen3-30b-a3b",
        "--nodes",
        "2",
        "--save",
        saved.to_str().unwrap(),
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let why = r
        .stdout
        .split("why the best plan:")
        .nth(1)
        .unwrap_or_else(|| panic!("no why-lines: {}", r.stdout));
    let ep = why
        .lines()
        .find(|l| l.trim_start().starts_with("EP 1: no expert parallelism"))
        .unwrap_or_else(|| panic!("no EP line in the why-lines: {why}"));
    // What EP > 1 would have cost: a plan with ep above 1 and its step, slower than the best's.
    let alternative = ep
        .split("the fastest plan with EP > 1 (")
        .nth(1)
        .unwrap_or_else(|| panic!("no EP > 1 alternative: {ep}"));
    let degrees = alternative.split(',').next().unwrap();
    let ep_degree: u32 = degrees
        .split(" ep ")
        .nth(1)
        .and_then(|d| d.split(' ').next())
        .and_then(|d| d.parse().ok())
        .unwrap_or_else(|| panic!("no ep degree in {degrees}"));
    assert!(ep_degree > 1, "{ep}");
    assert!(
        ep.contains("% more") && ep.contains("128 routed experts"),
        "{ep}"
    );
    // eval's plan line names the expert degrees at 1.
    let e = run(&["eval", "--plan", saved.to_str().unwrap()]);
    assert_eq!(e.code, 0, "{}", e.stderr);
    let plan_line = e.stdout.lines().find(|l| l.starts_with("plan: ")).unwrap();
    assert!(
        plan_line.contains("experts: ep 1 x etp 1 x expert-dp 16"),
        "{plan_line}"
    );
    // A dense model's plan line and why-lines say nothing of experts.
    let dense = run(&["plan", "--params", "7B", "--nodes", "1"]);
    assert!(!dense.stdout.contains("EP 1:"), "{}", dense.stdout);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_count_past_its_number_type_is_told_the_bound_the_model_check_holds_it_to() {
    let dir = scratch("leftovers37", "experts");
    let model = |experts: &str| {
        let path = dir.join(format!("moe-{experts}.yaml"));
        std::fs::write(
            &path,
            format!(
                "name: big-moe\nlayers: 2\nhidden: 1024\nheads: 8\nffn_hidden: 4096\nvocab: 32000\nseq_len: 2048\nmoe:\n  experts: {experts}\n  router_topk: 2\n  ffn_hidden: 1024\n"
            ),
        )
        .unwrap();
        path.to_str().unwrap().to_string()
    };
    let eval = |path: &str| {
        run(&[
            "eval",
            "--model",
            path,
            "--nodes",
            "1",
            "--tp",
            "1",
            "--global-batch",
            "8",
        ])
    };
    let r = eval(&model("4294967296"));
    assert_one_line_error(
        &r,
        &[
            "moe.experts: 4294967296 is larger than 16384",
            "give at most 16384, e.g. moe.experts: 256",
        ],
        &["4294967295", "--num-experts"],
        "experts past u32",
    );
    // The bound said is the check's: it passes, and one more is refused with the same words.
    let at_bound = eval(&model("16384"));
    assert!(
        !at_bound.stderr.contains("moe.experts"),
        "16384 experts refused: {}",
        at_bound.stderr
    );
    assert_one_line_error(
        &eval(&model("16385")),
        &["moe.experts: 16385 is larger than 16384"],
        &[],
        "experts past the bound",
    );
    let fine = eval(&model("256"));
    assert_eq!(fine.code, 0, "{}", fine.stderr);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn emit_torchtitan_takes_its_framework_as_emit_deepspeed_does_and_says_so() {
    for command in ["eval", "plan"] {
        for emit in ["deepspeed", "torchtitan"] {
            let mut args = vec![
                command,
                "--model",
                "llama3-8b",
                "--nodes",
                "1",
                "--global-batch",
                "64",
                "--emit",
                emit,
            ];
            if command == "eval" {
                args.extend(["--tp", "2", "--recompute", "full"]);
            }
            let r = run(&args);
            assert!(
                r.code == 0 || r.code == 1,
                "{command} --emit {emit} refused: {}",
                r.stderr
            );
            // Taken from --emit, said in a note: never a silent change.
            assert!(
                r.stderr.contains(&format!(
                    "note: --emit {emit} plans as --framework {emit} runs it"
                )) && r
                    .stderr
                    .contains(&format!("evaluated as --framework {emit} runs it")),
                "{command} --emit {emit}: {}",
                r.stderr
            );
            // The configuration is written.
            assert!(
                r.code != 0 || !r.stdout.trim().is_empty(),
                "{command} --emit {emit}: nothing written"
            );
        }
    }
    // A framework the user gave is kept: the emit still refuses it rather than changing it.
    assert_one_line_error(
        &run(&[
            "eval",
            "--model",
            "llama3-8b",
            "--nodes",
            "1",
            "--tp",
            "2",
            "--framework",
            "megatron-core",
            "--emit",
            "torchtitan",
        ]),
        &[
            "evaluated as megatron-core runs it (--framework megatron-core)",
            "use --framework torchtitan",
        ],
        &[],
        "typed framework",
    );
}

#[test]
fn a_gpu_file_under_a_bundled_name_is_named_as_the_files_profile() {
    let dir = scratch("leftovers37", "gpu-name");
    let gb200 = std::fs::read_to_string(format!("{ROOT}/clusters/gb200-nvl72.yaml")).unwrap();
    let fake = dir.join("fake.yaml");
    std::fs::write(
        &fake,
        gb200.replacen("name: gb200-nvl72", "name: h100-sxm-80g", 1),
    )
    .unwrap();
    let fake = fake.to_str().unwrap();
    for command in ["plan", "eval"] {
        let mut args = vec![command, "--params", "7B", "--nodes", "1", "--gpu", fake];
        if command == "eval" {
            args.extend(["--tp", "2"]);
        }
        let r = run(&args);
        let line = r
            .stdout
            .lines()
            .find(|l| l.starts_with("cluster: "))
            .unwrap_or_else(|| panic!("{command}: no cluster line: {}", r.stderr));
        assert!(
            line.contains(&format!("h100-sxm-80g (the profile in {fake}, not the bundled h100-sxm-80g: peak_bf16_tflops 2500.0 against 989.4")),
            "{command}: {line}"
        );
    }
    // The JSON names the file too.
    let j = json(&[
        "plan", "--params", "7B", "--nodes", "1", "--gpu", fake, "--format", "json",
    ]);
    assert_eq!(j["cluster"]["gpu_file"][0], fake, "{}", j["cluster"]);
    // A copy of the bundled profile (its description changed) is the bundled GPU: nothing said.
    let h100 = std::fs::read_to_string(format!("{ROOT}/clusters/h100-sxm-80g.yaml")).unwrap();
    let copy = dir.join("copy.yaml");
    std::fs::write(
        &copy,
        h100.lines()
            .map(|l| {
                if l.starts_with("description:") {
                    "description: mine"
                } else {
                    l
                }
            })
            .collect::<Vec<_>>()
            .join("\n"),
    )
    .unwrap();
    let r = run(&[
        "plan",
        "--params",
        "7B",
        "--nodes",
        "1",
        "--gpu",
        copy.to_str().unwrap(),
    ]);
    let line = r
        .stdout
        .lines()
        .find(|l| l.starts_with("cluster: "))
        .unwrap();
    assert!(
        line.starts_with("cluster: 1 node x 8 h100-sxm-80g = 8 GPUs"),
        "{line}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
