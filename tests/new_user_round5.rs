//! Regressions from the fifth review of valid usage by a new user about to commit a month of
//! cluster time: the same quantity printed by plan, eval, sweep, report and the README under one
//! name and one number, figures that say what they draw, and help texts that name their defaults
//! (each test names the finding it guards).

mod common;
use common::{csv_cells, json, run, scratch};
use serde_json::Value;

fn readme() -> String {
    std::fs::read_to_string(format!("{}/README.md", common::ROOT)).unwrap()
}

/// The `search: N candidates` count of a `plan` run.
fn plan_candidates(args: &[&str]) -> u64 {
    let r = run(args);
    assert_eq!(r.code, 0, "{args:?}: {}", r.stderr);
    let line = r
        .stdout
        .lines()
        .find(|l| l.starts_with("search: "))
        .unwrap_or_else(|| panic!("{args:?}: no search line in {}", r.stdout));
    line["search: ".len()..]
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// `sweep --format json` named the step time `step_time_s` (plan and eval: `time.step_s`), the
/// memory `memory_gib`/`capacity_gib` (plan: `memory.total_bytes`/`capacity_bytes`), the search
/// `candidates`/`feasible` (plan: `search.candidates`/`feasible`) and the time to train
/// `time_to_train_days` (plan: `time_to_train_s`). Each is now the plan's name and number.
#[test]
fn sweep_names_each_quantity_as_plan_json_does() {
    let scenario = ["--params", "512B", "--tokens", "300B"];
    let sweep = |format: &str| {
        let mut args = vec![
            "sweep", "--axis", "nodes", "--values", "32", "--format", format,
        ];
        args.extend(scenario);
        run(&args)
    };
    let mut plan_args = vec!["plan", "--nodes", "32", "--top", "1", "--format", "json"];
    plan_args.extend(scenario);
    let plan = json(&plan_args);
    let best = &plan["plans"][0];
    let r = sweep("json");
    assert_eq!(r.code, 0, "{}", r.stderr);
    let swept: Value = serde_json::from_str(&r.stdout).unwrap();
    let row = &swept["rows"][0];
    assert_eq!(row["time"]["step_s"], best["time"]["step_s"], "{row}");
    assert_eq!(row["time"]["step_s_low"], best["time"]["step_s_low"]);
    assert_eq!(row["time"]["step_s_high"], best["time"]["step_s_high"]);
    assert_eq!(row["memory"]["total_bytes"], best["memory"]["total_bytes"]);
    assert_eq!(
        row["memory"]["capacity_bytes"],
        best["memory"]["capacity_bytes"]
    );
    assert_eq!(row["search"]["candidates"], plan["search"]["candidates"]);
    assert_eq!(row["search"]["candidates"], 29836);
    assert_eq!(row["search"]["feasible"], plan["search"]["feasible"]);
    assert_eq!(row["time_to_train_s"], best["time_to_train_s"]);
    let free = row["memory"]["free_bytes"].as_f64().unwrap();
    let want = best["memory"]["capacity_bytes"].as_f64().unwrap()
        - best["memory"]["total_bytes"].as_f64().unwrap();
    assert!((free - want).abs() < 1.0, "{free} vs {want}");
    for old in [
        "step_time_s",
        "step_time_s_low",
        "memory_gib",
        "capacity_gib",
        "memory_headroom_gib",
        "time_to_train_days",
        "candidates",
    ] {
        assert!(row.get(old).is_none(), "old name {old} in {row}");
    }
    // CSV: the same names as dotted paths, the same numbers.
    let r = sweep("csv");
    assert_eq!(r.code, 0, "{}", r.stderr);
    let lines: Vec<&str> = r.stdout.lines().collect();
    let header: Vec<&str> = lines[0].split(',').collect();
    let cells: Vec<String> = csv_cells(lines[1]);
    let cell = |name: &str| {
        let i = header
            .iter()
            .position(|h| *h == name)
            .unwrap_or_else(|| panic!("no {name} column in {}", lines[0]));
        cells[i].parse::<f64>().unwrap()
    };
    let step = best["time"]["step_s"].as_f64().unwrap();
    assert!((cell("time.step_s") - step).abs() < 1e-4, "{}", lines[1]);
    let total = best["memory"]["total_bytes"].as_f64().unwrap();
    assert!((cell("memory.total_bytes") - total).abs() <= 1.0);
    assert_eq!(cell("search.candidates"), 29836.0);
    let train = best["time_to_train_s"].as_f64().unwrap();
    assert!((cell("time_to_train_s") - train).abs() <= 1.0);
    assert!(!lines[0].contains("step_time_s"), "{}", lines[0]);
}

/// The README's "Speed" section quoted 25,425, 363,340 and 156,820 candidates for the DeepSeek-V3,
/// DeepSeek-V3 `--allow-uneven-pp` and Qwen3-235B searches, whose `plan` commands print 30,510,
/// 451,320 and 195,390 (the bench left Megatron-Core's default recompute modules unset). The
/// section's table now names each command and the count it prints.
#[test]
fn readme_speed_table_quotes_the_candidates_plan_prints() {
    let readme = readme();
    let section = &readme[readme.find("## Speed").unwrap()..readme.find("## Layout").unwrap()];
    let mut checked = 0;
    for line in section.lines().filter(|l| l.starts_with("| `tpsim plan")) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let command = cells[1].trim_matches('`');
        let quoted: u64 = cells[2].replace(',', "").parse().unwrap();
        let args: Vec<&str> = command.split_whitespace().skip(1).collect();
        assert_eq!(plan_candidates(&args), quoted, "{command}");
        checked += 1;
    }
    assert_eq!(checked, 5, "{section}");
}

/// The report of a plan without a pipeline labelled its timeline's one row "stage 0" on a
/// "pipeline stage" axis. The row is every GPU, running all the layers; a pipelined plan keeps
/// its stages.
#[test]
fn timeline_without_a_pipeline_says_what_its_row_is() {
    let dir = scratch("new-user-5", "pp1");
    let out = dir.join("r");
    let r = run(&[
        "eval",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--tp",
        "2",
        "--zero",
        "1",
        "--seq-len",
        "4096",
        "--global-batch",
        "64",
        "--report",
        out.to_str().unwrap(),
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let svg = std::fs::read_to_string(out.join("timeline.svg")).unwrap();
    assert!(!svg.contains("pipeline stage"), "pp 1 drawn as a pipeline");
    assert!(!svg.contains("stage 0"), "pp 1 drawn as a pipeline");
    assert!(svg.contains("every GPU"), "the row is not named");
    assert!(
        svg.contains("no pipeline: every GPU runs all 32 layers"),
        "the subtitle does not say what the row runs"
    );
    let seed = dir.join("seed");
    let r = run(&[
        "report",
        "plans/seed-512b-32nodes.yaml",
        "--out",
        seed.to_str().unwrap(),
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let svg = std::fs::read_to_string(seed.join("timeline.svg")).unwrap();
    assert!(svg.contains("pipeline stage") && svg.contains("stage 15"));
}

/// `(y, text)` of every SVG text element whose text ends with `suffix`.
fn texts_ending(svg: &str, suffix: &str) -> Vec<(f64, String)> {
    let mut out = Vec::new();
    let mut rest = svg;
    while let Some(start) = rest.find("<text ") {
        let tail = &rest[start..];
        let close = tail.find("</text>").unwrap();
        let element = &tail[..close];
        let text = element[element.find('>').unwrap() + 1..].trim().to_string();
        if text.ends_with(suffix) && text.chars().next().unwrap().is_ascii_digit() {
            let y = element.split("y=\"").nth(1).unwrap();
            let y: f64 = y[..y.find('"').unwrap()].parse().unwrap();
            out.push((y, text));
        }
        rest = &tail[close..];
    }
    out
}

/// The memory figure put a bar's total above the bar, but inside the bar's top when the bar was
/// within 6% of the axis below the capacity line (74.0 GiB above its bar, 75.6 GiB inside its
/// neighbours' on one figure). Every total is now in one row above the capacity line; and the
/// lines under the bars name sequence parallelism, which told apart two bars labelled
/// "t2·p1·d4, vpp 1 · mb 4 · ZeRO-2, recompute none" at 74.0 and 65.4 GiB.
#[test]
fn memory_figure_labels_sit_in_one_row_and_name_sequence_parallelism() {
    let dir = scratch("new-user-5", "near");
    let r = run(&[
        "eval",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--tp",
        "2",
        "--pp",
        "1",
        "--micro-batch",
        "4",
        "--zero",
        "2",
        "--global-batch",
        "96",
        "--seq-len",
        "4096",
        "--report",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let svg = std::fs::read_to_string(dir.join("memory.svg")).unwrap();
    let labels = texts_ending(&svg, " GiB");
    let totals: Vec<&str> = labels.iter().map(|(_, t)| t.as_str()).collect();
    assert_eq!(
        totals,
        ["74.0 GiB", "75.6 GiB", "75.6 GiB", "65.4 GiB", "65.4 GiB"],
        "{labels:?}"
    );
    let y0 = labels[0].0;
    assert!(labels.iter().all(|(y, _)| *y == y0), "{labels:?}");
    // The capacity line (red polyline) lies below the row of totals.
    let line = svg
        .lines()
        .find(|l| l.contains("<polyline") && l.contains("#FF0000"))
        .expect("a capacity line");
    let points = line.split("points=\"").nth(1).unwrap();
    let line_y: f64 = points.split([',', ' ']).nth(1).unwrap().parse().unwrap();
    assert!(y0 < line_y, "totals at {y0}, line at {line_y}");
    // Sequence parallelism under each bar: the evaluated plan runs without it, #3 with it.
    assert!(svg.contains("vpp 1 · mb 4 · ZeRO-2"), "the evaluated plan");
    assert!(svg.contains("vpp 1 · mb 4 · sp · ZeRO-2"), "search #3");
}

/// The sweep's table said "(117236 plans evaluated in ...)" for the sum of its points'
/// candidates, which include the splits found invalid and never evaluated; `plan` calls the same
/// number "candidates". The sweep now does too, with `plan`'s count.
#[test]
fn sweep_table_counts_candidates_as_plan_does() {
    let r = run(&[
        "sweep",
        "--model",
        "deepseek-v3",
        "--gpu",
        "h100-sxm-80g",
        "--global-batch",
        "4096",
        "--axis",
        "nodes",
        "--values",
        "256",
        "--allow-uneven-pp",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let line = r
        .stdout
        .lines()
        .find(|l| l.starts_with("sweep over nodes:"))
        .unwrap();
    assert!(line.contains("(430152 candidates searched in "), "{line}");
    assert!(!line.contains("evaluated"), "{line}");
    // `plan` prints the same count for the same point, 214,164 of them invalid (splits, and MoE
    // plans at tp > 1 without sequence parallelism, which Megatron-Core refuses).
    let plan = json(&[
        "plan",
        "--model",
        "deepseek-v3",
        "--gpu",
        "h100-sxm-80g",
        "--global-batch",
        "4096",
        "--nodes",
        "256",
        "--allow-uneven-pp",
        "--top",
        "1",
        "--format",
        "json",
    ]);
    assert_eq!(plan["search"]["candidates"], 430152);
    assert_eq!(
        plan["search"]["infeasible_by_reason"]["invalid_plan"],
        214164
    );
}

/// The report's plans table wrote the ZeRO stage of a ZeRO-3 plan that keeps its gathered
/// parameters as "3" where `plan`'s table writes "3 keep", and named its columns "recompute",
/// "ZeRO", "memory GiB" against the table's "recomp", "zero", "mem GiB".
#[test]
fn report_plans_table_names_and_writes_as_plan_table() {
    let dir = scratch("new-user-5", "keep");
    let r = run(&[
        "eval",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--tp",
        "1",
        "--zero",
        "3",
        "--reshard-after-forward",
        "false",
        "--global-batch",
        "64",
        "--report",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let html = std::fs::read_to_string(dir.join("index.html")).unwrap();
    let table = &html[html.find("<table>").unwrap()..];
    let table = &table[..table.find("</table>").unwrap()];
    for header in ["<th>recomp</th>", "<th>zero</th>", "<th>mem GiB</th>"] {
        assert!(table.contains(header), "{header} in {table}");
    }
    for old in ["<th>recompute</th>", "<th>ZeRO</th>", "<th>memory GiB</th>"] {
        assert!(!table.contains(old), "{old} in {table}");
    }
    let this_plan = table
        .lines()
        .find(|l| l.starts_with("<tr><td>this plan"))
        .expect("the evaluated plan's row");
    assert!(
        this_plan.contains("<td class=\"n\">3 keep</td>"),
        "{this_plan}"
    );
}

/// `eval --help` gave no default for --tp, --pp, --cp, --ep, --vpp, --micro-batch, --recompute
/// and --zero, which `eval` fills in as 1, 1, 1, 1, 1, 1, none and ZeRO-0 (the plan line names
/// them, the help did not). Each now says it, and the plan line agrees.
#[test]
fn eval_help_names_the_plan_defaults_eval_uses() {
    let r = run(&["eval", "--help"]);
    assert_eq!(r.code, 0);
    let help = r.stdout.split_whitespace().collect::<Vec<_>>().join(" ");
    for (flag, default) in [
        ("--tp <TP>", "Default: 1"),
        ("--pp <PP>", "Default: 1"),
        ("--cp <CP>", "Default: 1"),
        ("--ep <EP>", "Default: 1"),
        ("--vpp <VPP>", "Default: 1"),
        ("--micro-batch <MICRO_BATCH>", "Default: 1"),
        ("--recompute <RECOMPUTE>", "Default: none"),
        ("--zero <ZERO>", "Default: 0"),
    ] {
        let at = help
            .find(flag)
            .unwrap_or_else(|| panic!("no {flag} in help"));
        let paragraph = &help[at..];
        let end = paragraph[flag.len()..]
            .find(" --")
            .map_or(paragraph.len(), |e| e + flag.len());
        assert!(
            paragraph[..end].contains(default),
            "{flag}: {}",
            &paragraph[..end]
        );
    }
    let r = run(&[
        "eval",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--dp",
        "8",
        "--global-batch",
        "64",
    ]);
    // ZeRO-0 on one node does not fit an 8B model (exit 1); the plan line is printed all the same.
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    let plan = r.stdout.lines().find(|l| l.starts_with("plan: ")).unwrap();
    assert!(
        plan.starts_with("plan: tp 1 x cp 1 x pp 1 x dp 8 (vpp 1), micro-batch 1 x ")
            && plan.contains("recompute none, ZeRO-0"),
        "{plan}"
    );
}

/// `compare` printed the best plan's MFU as 52.95 and its memory as 69.40 GiB where `plan`, `eval`
/// and the report print 52.9 and 69.4: the same quantity, two numbers a reader cannot reconcile
/// (52.95 rounds to 53.0). GiB and % are now printed to one decimal, as everywhere else.
#[test]
fn compare_prints_memory_and_mfu_as_plan_does() {
    let scenario = ["--params", "512B", "--nodes", "32"];
    let mut plan_args = vec!["plan", "--top", "2", "--format", "json"];
    plan_args.extend(scenario);
    let plan = json(&plan_args);
    let mut compare_args = vec!["compare"];
    compare_args.extend(scenario);
    let r = run(&compare_args);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let row = |group: &str, term: &str| -> Vec<String> {
        let line = r
            .stdout
            .lines()
            .find(|l| {
                let cells: Vec<&str> = l.split('┆').map(|c| c.trim_matches([' ', '│'])).collect();
                cells.len() > 4 && cells[0] == group && cells[1] == term
            })
            .unwrap_or_else(|| panic!("no {group} {term} row in {}", r.stdout));
        line.split('┆')
            .map(|c| c.trim_matches([' ', '│']).to_string())
            .collect()
    };
    let plans = plan["plans"].as_array().unwrap();
    let mfu = row("throughput", "MFU");
    let total = row("memory per GPU", "total");
    for (i, p) in plans.iter().enumerate() {
        let want = format!("{:.1}", 100.0 * p["mfu"].as_f64().unwrap());
        assert_eq!(mfu[3 + i], want, "MFU of plan {i}: {mfu:?}");
        let gib = p["memory"]["total_bytes"].as_f64().unwrap() / (1u64 << 30) as f64;
        assert_eq!(
            total[3 + i],
            format!("{gib:.1}"),
            "memory of plan {i}: {total:?}"
        );
    }
    assert_eq!(mfu[3], "52.8", "{mfu:?}");
    assert_eq!(total[3], "69.4", "{total:?}");
}

/// A sweep exported as JSON or CSV, or drawn as a chart, did not say which GPU, sequence length
/// or global batch it was planned for: with `--params 175B --axis nodes` all three are defaults
/// (h100-sxm-80g, 2048 tokens, 1536 sequences), named only in a note on stderr. Each row now
/// carries them under `plan`'s JSON names, and the chart's title names them.
#[test]
fn sweep_exports_and_chart_name_the_gpu_and_batch_they_were_planned_for() {
    let dir = scratch("new-user-5", "chart");
    let chart = dir.join("c.svg");
    let r = run(&[
        "sweep",
        "--params",
        "175B",
        "--axis",
        "nodes",
        "--values",
        "16",
        "--format",
        "json",
        "--chart",
        chart.to_str().unwrap(),
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let row = &serde_json::from_str::<Value>(&r.stdout).unwrap()["rows"][0];
    let plan = json(&[
        "plan", "--params", "175B", "--nodes", "16", "--top", "1", "--format", "json",
    ]);
    assert_eq!(row["gpu"], plan["cluster"]["gpu"], "{row}");
    assert_eq!(row["gpu"], "h100-sxm-80g");
    assert_eq!(row["seq_len"], plan["training"]["seq_len"]);
    assert_eq!(row["global_batch"], plan["training"]["global_batch"]);
    assert_eq!(row["global_batch"], 1536);
    let svg = std::fs::read_to_string(&chart).unwrap();
    let title: String = svg
        .split("<text")
        .take(3)
        .filter_map(|t| t.split('>').nth(1))
        .map(|t| t.split('<').next().unwrap().trim().to_string())
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        title.contains("on 16 nodes of 8 h100-sxm-80g; 1536 sequences x 2048 tokens per step"),
        "{title}"
    );
    let r = run(&[
        "sweep", "--params", "175B", "--axis", "nodes", "--values", "16", "--format", "csv",
    ]);
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert!(
        lines[0].starts_with("axis,value,gpus,params,gpu,seq_len,global_batch,"),
        "{}",
        lines[0]
    );
    assert!(lines[1].starts_with("nodes,16,128,"), "{}", lines[1]);
    assert!(
        lines[1].contains(",h100-sxm-80g,2048,1536,"),
        "{}",
        lines[1]
    );
}
