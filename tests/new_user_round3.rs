//! Regressions from the third review of valid usage by a new user planning a long-context run
//! (context parallelism), an MoE run and an FP8/MXFP8 run: where a line pointed at another that
//! says nothing, or an emitted configuration ran another plan than the one priced (each test
//! names the finding it guards).

mod common;
use common::run;

/// Llama 3 8B at 128K tokens with tp 4 x cp 4, as `plan` picks it.
const LONG_CONTEXT: [&str; 22] = [
    "eval",
    "--model",
    "llama3-8b",
    "--nodes",
    "8",
    "--seq-len",
    "131072",
    "--global-batch",
    "64",
    "--tp",
    "4",
    "--cp",
    "4",
    "--pp",
    "1",
    "--micro-batch",
    "1",
    "--recompute",
    "none",
    "--zero",
    "1",
    "--sequence-parallel",
];

fn cp_line(stdout: &str) -> String {
    stdout
        .lines()
        .find(|l| l.trim_start().starts_with("CP ") && l.contains(" GB on "))
        .expect("a CP communication line")
        .to_string()
}

/// `eval`'s CP line said how K/V move "(how: the training line)", but under Megatron-Core's
/// default K/V ring the training line says nothing about context parallelism: the pointer led
/// nowhere. The line now names the exchange itself, and the one `--cp-exchange` chose.
#[test]
fn cp_line_names_the_exchange_instead_of_pointing_at_a_silent_training_line() {
    let r = run(&LONG_CONTEXT);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let training = r
        .stdout
        .lines()
        .find(|l| l.starts_with("training:"))
        .expect("a training line");
    assert!(!training.contains("context parallelism"), "{training}");
    let line = cp_line(&r.stdout);
    assert!(!line.contains("the training line"), "{line}");
    assert!(line.contains("Transformer Engine's K/V ring"), "{line}");

    // torchtitan fits it with FSDP2 and full activation checkpointing.
    let mut torch = LONG_CONTEXT.to_vec();
    for (flag, value) in [("--recompute", "full"), ("--zero", "3")] {
        let at = torch.iter().position(|a| *a == flag).unwrap();
        torch[at + 1] = value;
    }
    torch.extend([
        "--framework",
        "torchtitan",
        "--cp-exchange",
        "torch-all-gather",
    ]);
    let r = run(&torch);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let line = cp_line(&r.stdout);
    assert!(line.contains("PyTorch's context_parallel"), "{line}");
    assert!(!line.contains("K/V ring"), "{line}");
}

/// A ZeRO-2 plan is priced without gradient-accumulation fusion (Megatron-FSDP runs it off), and
/// `--emit megatron` writes `--no-gradient-accumulation-fusion`, but `--emit nemo` wrote
/// `gradient_accumulation_fusion: true`: a faster plan than the one printed above it.
#[test]
fn nemo_writes_the_gradient_accumulation_fusion_the_plan_was_priced_with() {
    let base = [
        "plan",
        "--model",
        "llama3-70b",
        "--nodes",
        "16",
        "--seq-len",
        "8192",
        "--global-batch",
        "512",
    ];
    let emit = |zero: &str, target: &str| {
        let r = run(&[&base[..], &["--zero", zero, "--emit", target][..]].concat());
        assert_eq!(r.code, 0, "{}", r.stderr);
        r.stdout
    };
    let nemo = emit("2", "nemo");
    assert!(
        nemo.contains("gradient_accumulation_fusion: false"),
        "{nemo}"
    );
    assert!(
        emit("2", "megatron").contains("--no-gradient-accumulation-fusion"),
        "the Megatron-LM line of the same plan runs unfused"
    );
    // ZeRO-1 keeps the fusion, in both.
    let nemo = emit("1", "nemo");
    assert!(
        nemo.contains("gradient_accumulation_fusion: true"),
        "{nemo}"
    );
    assert!(!emit("1", "megatron").contains("--no-gradient-accumulation-fusion"));
}

/// MXFP8 on B200: `--emit nemo` said no plan can run in NeMo because "ZeRO-3 has no NeMo 1.x
/// optimizer; use --zero 0, 1 or 2" (the fastest plan's first reason), yet with --zero 1 it still
/// refused, for the precision. The reason every plan shares is now the one given.
#[test]
fn nemo_refusal_names_the_reason_that_holds_for_every_plan() {
    let r = run(&[
        "plan",
        "--model",
        "llama3-70b",
        "--gpu",
        "b200-sxm-180g",
        "--nodes",
        "8",
        "--seq-len",
        "8192",
        "--global-batch",
        "512",
        "--precision",
        "mxfp8",
        "--emit",
        "nemo",
    ]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stdout.is_empty(), "{}", r.stdout);
    assert!(
        r.stderr
            .contains("--precision mxfp8 has no NeMo 1.x setting"),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains("use --zero"), "{}", r.stderr);
}

/// Qwen3-235B on 32 GB200 NVL72 trays (4 GPUs each): the layout figure's legend said the 16-GPU EP
/// groups and the 32-rank DP groups exchange "over NVLink (inside a node)", though each spans
/// four or more trays; they stay on NVLink because the rack's NVLink domain holds them.
#[test]
fn layout_legend_does_not_put_a_group_spanning_trays_inside_a_node() {
    let dir = common::scratch("new_user_round3", "layout_nvl72");
    let out = dir.to_str().unwrap();
    let r = run(&[
        "eval",
        "--model",
        "qwen3-235b-a22b",
        "--gpu",
        "gb200-nvl72",
        "--nodes",
        "32",
        "--global-batch",
        "1024",
        "--seq-len",
        "4096",
        "--tp",
        "2",
        "--pp",
        "2",
        "--vpp",
        "47",
        "--ep",
        "16",
        "--etp",
        "1",
        "--micro-batch",
        "4",
        "--sequence-parallel",
        "--recompute",
        "selective",
        "--zero",
        "3",
        "--report",
        out,
    ]);
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    let svg = std::fs::read_to_string(dir.join("layout.svg")).unwrap();
    let legend = |start: &str| {
        svg.split(['<', '>'])
            .map(str::trim)
            .find(|t| t.starts_with(start))
            .unwrap_or_else(|| panic!("a legend line starting {start:?}"))
            .to_string()
    };
    // TP 2 stays on one tray; EP 16 and DP 32 span trays on the rack's NVLink.
    assert!(legend("TP groups").contains("NVLink (inside a node)"));
    for start in ["EP groups", "DP: 32 replicas", "expert DP:"] {
        let line = legend(start);
        assert!(!line.contains("inside a node"), "{line}");
        assert!(
            line.contains("NVLink (across nodes of one NVLink domain)"),
            "{line}"
        );
    }
}

/// `compare` printed CP and EP time rows of 0.000 for two plans that use neither, while it hid
/// their traffic rows, and listed traffic as TP/CP/EP/PP against the time rows' TP/CP/PP/EP.
#[test]
fn compare_lists_cp_and_ep_rows_together_and_in_one_order() {
    let r = run(&["compare", "--params", "512B", "--nodes", "32"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!r.stdout.contains("EP comm"), "{}", r.stdout);
    assert!(!r.stdout.contains("CP comm"), "{}", r.stdout);
    let order: Vec<&str> = r
        .stdout
        .lines()
        .filter(|l| l.contains("traffic per GPU per step"))
        .map(|l| l.split('┆').nth(1).unwrap_or("").trim())
        .collect();
    assert_eq!(order, ["TP", "PP", "DP"], "{}", r.stdout);
}

/// `--emit megatron-bridge` wrote `comm_overlap.overlap_p2p_comm=true` for a plan with no
/// pipeline, where p2p overlap does not exist (the NeMo writer and the cost model say false).
#[test]
fn bridge_overlaps_p2p_only_in_an_interleaved_pipeline() {
    let r = run(&[
        "plan",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--pp",
        "1",
        "--emit",
        "megatron-bridge",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains("comm_overlap.overlap_p2p_comm=false"),
        "{}",
        r.stdout
    );
}

/// A small model's 8.7 ms step printed as 0.01 s in the table and its range as "0.01–0.01 s".
#[test]
fn sub_tenth_second_steps_keep_three_significant_digits() {
    let r = run(&[
        "plan",
        "--layers",
        "4",
        "--hidden",
        "1024",
        "--heads",
        "8",
        "--nodes",
        "1",
        "--global-batch",
        "8",
        "--seq-len",
        "512",
        "--top",
        "2",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let range = r
        .stdout
        .lines()
        .find(|l| l.starts_with("range:"))
        .expect("a range line");
    let (low, high) = range
        .split_once(" takes ")
        .and_then(|(_, rest)| rest.split_once(" s per step"))
        .and_then(|(span, _)| span.split_once('–'))
        .expect("a low–high span");
    assert_ne!(low, high, "{range}");
    assert!(low.starts_with("0.00") && low.len() >= 6, "{range}");
}

/// `sweep` printed each point's step time without the range `plan` prints beside the same plan;
/// its table, CSV and JSON now carry it, and it is `plan`'s range.
#[test]
fn sweep_points_carry_the_range_plan_prints() {
    let r = run(&[
        "sweep",
        "--model",
        "llama3-8b",
        "--axis",
        "nodes",
        "--values",
        "1,2",
        "--format",
        "json",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let sweep: serde_json::Value = serde_json::from_str(&r.stdout).expect("JSON");
    let first = &sweep["rows"][0];
    let (low, high) = (
        first["time"]["step_s_low"].as_f64().expect("a low step"),
        first["time"]["step_s_high"].as_f64().expect("a high step"),
    );
    assert!(low < high && low.is_finite() && high.is_finite(), "{first}");
    assert!(
        first["tokens_per_s_low"].as_f64().unwrap() < first["tokens_per_s_high"].as_f64().unwrap()
    );
    let plan = run(&["plan", "--model", "llama3-8b", "--nodes", "1"]);
    let range = plan
        .stdout
        .lines()
        .find(|l| l.starts_with("range:"))
        .expect("a range line");
    assert!(
        range.contains(&format!("{low:.2}–{high:.2} s per step")),
        "{range} against {low:.2}–{high:.2}"
    );
}

/// The sweep chart drew each point's throughput without the range its table prints: the
/// throughput panel now draws a bar (and two caps) from low to high at every point.
#[test]
fn the_sweep_chart_draws_each_points_range() {
    let dir = std::env::temp_dir().join(format!("tpsim-sweep-range-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("sweep.svg");
    let path_str = path.to_str().unwrap();
    let with_range = |chart: &str| {
        run(&[
            "sweep", "--params", "175B", "--axis", "nodes", "--values", "16,32,64", "--chart",
            chart,
        ])
    };
    let r = with_range(path_str);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let svg = std::fs::read_to_string(&path).unwrap();
    assert!(
        svg.contains("bars: range of tpsim&apos;s error")
            || svg.contains("bars: range of tpsim's error")
    );
    // Three points, three strokes each (the bar and its two caps), drawn half-transparent.
    let bars = svg
        .matches("<polyline")
        .zip(svg.split("<polyline").skip(1))
        .filter(|(_, rest)| {
            rest.split('>')
                .next()
                .is_some_and(|tag| tag.contains("opacity=\"0.55\""))
        })
        .count();
    let sweep: serde_json::Value = serde_json::from_str(
        &run(&[
            "sweep", "--params", "175B", "--axis", "nodes", "--values", "16,32,64", "--format",
            "json",
        ])
        .stdout,
    )
    .unwrap();
    assert!(
        sweep["rows"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["tokens_per_s_low"].is_f64())
    );
    assert_eq!(bars, 9, "{bars} range strokes");
    std::fs::remove_dir_all(&dir).unwrap();
}
