//! Regressions from the twenty-second review of valid usage by a new user: an ML infrastructure
//! engineer buying hardware for a fixed job (Llama 3 70B on 15T tokens: H100 against H200, B200
//! and GB200 NVL72 with `plan`, `sweep --axis gpu` and `compare`, time and cost to train), a team
//! sizing the largest model 512 GPUs train on 2T tokens in 30 days, a researcher reading
//! `accuracy`, `accuracy --run` and validation/FIT.md, `calibrate` on a machine without a GPU,
//! and `eval`'s communication rows against the report's ledger (each test names the finding).

mod common;
use common::{ROOT, run, scratch};

fn stdout_of(args: &[&str]) -> String {
    let r = run(args);
    assert_eq!(r.code, 0, "{args:?}: {}", r.stderr);
    r.stdout
}

/// A small job swept over one GPU with a band of its own (H100: Megatron-Core dense runs), one
/// without (H200: fewer than 8 runs) and an NVL72 tray, on 16 GPUs each.
const GPU_SWEEP: [&str; 13] = [
    "sweep",
    "--model",
    "llama3-8b",
    "--nodes",
    "2",
    "--gpus-per-node",
    "8",
    "--axis",
    "gpu",
    "--values",
    "h100-sxm-80g,h200-sxm-141g,gb200-nvl72",
    "--tokens",
    "1T",
];

/// `sweep --axis gpu --price-per-gpu-hour 2.5` priced an H100 and a GB200 hour alike and said
/// nothing of it: the cost column read a GB200 job at less than half an H100 job's cost, which a
/// buyer takes for the GPUs' costs when it is only their times at one price. The sweep now says
/// on stderr that every GPU is priced at the one price and how to read a row at its GPU's own
/// (its cost x that price / the one given: the cost is the time x the GPUs x the price, which
/// the JSON's rows are checked to hold). A sweep of one GPU over nodes, or without a price, says
/// nothing of it.
#[test]
fn a_gpu_sweep_says_every_gpu_is_priced_at_the_one_price() {
    let mut args = GPU_SWEEP.to_vec();
    args.extend(["--price-per-gpu-hour", "2.5"]);
    let r = run(&args);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let note = r
        .stderr
        .lines()
        .find(|l| l.contains("prices every GPU at the one --price-per-gpu-hour 2.5"))
        .unwrap_or_else(|| panic!("no one-price note in:\n{}", r.stderr));
    assert!(note.starts_with("note: "), "{note}");
    assert!(note.contains("its cost x that price / 2.5"), "{note}");
    // The note's arithmetic holds: each row's cost is linear in the price.
    args.extend(["--format", "json"]);
    let v: serde_json::Value = serde_json::from_str(&stdout_of(&args)).unwrap();
    let rows = v["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 3, "{v}");
    for row in rows {
        let (time, gpus, cost) = (
            row["time_to_train_s"].as_f64().expect("a time to train"),
            row["gpus"].as_f64().expect("a GPU count"),
            row["cost_to_train"].as_f64().expect("a cost"),
        );
        assert!(
            (cost - time / 3600.0 * gpus * 2.5).abs() < 1e-6 * cost,
            "{row}"
        );
    }
    // No price, or one GPU over nodes: nothing to say.
    let plain = run(&GPU_SWEEP);
    assert_eq!(plain.code, 0, "{}", plain.stderr);
    assert!(
        !plain.stderr.contains("the one --price-per-gpu-hour"),
        "{}",
        plain.stderr
    );
    let nodes = run(&[
        "sweep",
        "--model",
        "llama3-8b",
        "--axis",
        "nodes",
        "--values",
        "1,2",
        "--tokens",
        "1T",
        "--price-per-gpu-hour",
        "2.5",
    ]);
    assert_eq!(nodes.code, 0, "{}", nodes.stderr);
    assert!(
        !nodes.stderr.contains("the one --price-per-gpu-hour"),
        "{}",
        nodes.stderr
    );
}

/// The texts of an SVG's `<text>` elements, trimmed.
fn svg_texts(svg: &str) -> Vec<String> {
    svg.split("<text")
        .skip(1)
        .filter_map(|t| {
            let body = t.split_once('>')?.1;
            Some(body.split("</text>").next()?.trim().to_string())
        })
        .collect()
}

/// The same one price, drawn: `sweep --axis gpu --chart` titled its panel "cost to train ($)",
/// a figure that travels without the terminal's note. Across GPUs the panel's title now names
/// the price every GPU was drawn at; across nodes it stays as it was.
#[test]
fn a_gpu_sweep_chart_names_the_one_price_in_its_cost_panel() {
    let dir = scratch("new_user_round22", "gpu_chart_price");
    let chart = dir.join("gpus.svg");
    let chart = chart.to_str().unwrap();
    let mut args = GPU_SWEEP.to_vec();
    args.extend(["--price-per-gpu-hour", "2.5", "--chart", chart]);
    stdout_of(&args);
    let texts = svg_texts(&std::fs::read_to_string(chart).unwrap());
    let cost: Vec<&String> = texts
        .iter()
        .filter(|t| t.starts_with("cost to train"))
        .collect();
    assert_eq!(cost.len(), 1, "{texts:?}");
    assert!(
        cost[0].contains("every GPU at $2.5 per GPU-hour"),
        "{cost:?}"
    );
    let nodes_chart = dir.join("nodes.svg");
    let nodes_chart = nodes_chart.to_str().unwrap();
    stdout_of(&[
        "sweep",
        "--model",
        "llama3-8b",
        "--axis",
        "nodes",
        "--values",
        "1,2",
        "--tokens",
        "1T",
        "--price-per-gpu-hour",
        "2.5",
        "--chart",
        nodes_chart,
    ]);
    let texts = svg_texts(&std::fs::read_to_string(nodes_chart).unwrap());
    assert!(texts.iter().any(|t| t == "cost to train ($)"), "{texts:?}");
}

/// `plan` on H200 says its range rests on the pooled band of every framework and GPU ("fewer
/// than 8 of them on h200, too few for a band of its own"), but `sweep --axis gpu` printed the
/// H200 row's wider `range s` beside the H100's measured one with no word on either: a buyer read
/// both as measured on their GPU. The sweep now says, under the table, what a row's range rests
/// on where its GPU has no band of its own, in the words of that GPU's `plan` range line, and
/// says nothing for a GPU with its own band.
#[test]
fn a_gpu_sweep_says_which_ranges_rest_on_no_run_of_their_gpu() {
    let out = stdout_of(&GPU_SWEEP);
    let said: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("range s is the 5th–95th percentile"))
        .collect();
    assert_eq!(said.len(), 1, "{out}");
    let line = said[0];
    assert!(line.starts_with("--axis gpu at h200-sxm-141g: "), "{line}");
    let basis = line.split_once("of tpsim's error on ").unwrap().1;
    assert!(basis.contains("too few for a band of its own"), "{line}");
    // One basis, one wording: the plan of the H200 point says the same.
    let plan = stdout_of(&[
        "plan",
        "--model",
        "llama3-8b",
        "--nodes",
        "2",
        "--gpu",
        "h200-sxm-141g",
        "--top",
        "1",
    ]);
    let range = plan
        .lines()
        .find(|l| l.starts_with("range:"))
        .unwrap_or_else(|| panic!("no range line in:\n{plan}"));
    assert!(
        range.contains(&format!("of tpsim's error on {basis})")),
        "sweep: {basis}\nplan: {range}"
    );
}

/// `compare --plan h100.yaml --plan gb200.yaml` (the best plan of one job on each GPU) was
/// refused with "compare only plans of one scenario, or give the value as a flag ... to evaluate
/// both plans on it": evaluating the H100 plan on a GB200 (or the reverse) is not how GPUs are
/// weighed, and the command that does it was not named. The error now names `sweep --axis gpu`
/// with the two GPUs; plans that differ on anything but the GPU are refused as before.
#[test]
fn compare_of_two_gpus_plans_names_the_gpu_sweep() {
    let dir = scratch("new_user_round22", "compare_gpus");
    let save = |gpu: &str, nodes: &str| {
        let file = dir.join(format!("{gpu}-{nodes}.yaml"));
        let path = file.to_str().unwrap().to_string();
        stdout_of(&[
            "plan",
            "--model",
            "llama3-8b",
            "--nodes",
            nodes,
            "--gpu",
            gpu,
            "--top",
            "1",
            "--save",
            &path,
        ]);
        path
    };
    let (h100, gb200, h100_1) = (
        save("h100-sxm-80g", "2"),
        save("gb200-nvl72", "4"),
        save("h100-sxm-80g", "1"),
    );
    let r = run(&["compare", "--plan", &h100, "--plan", &gb200]);
    common::assert_one_line_error(
        &r,
        &[
            "describe different scenarios",
            "GPU: h100-sxm-80g against gb200-nvl72",
            "`tpsim sweep --axis gpu --values h100-sxm-80g,gb200-nvl72`",
        ],
        &[],
        "compare across GPUs",
    );
    let r = run(&["compare", "--plan", &h100, "--plan", &h100_1]);
    common::assert_one_line_error(
        &r,
        &["describe different scenarios", "nodes: 2 against 1"],
        &["sweep --axis gpu"],
        "compare across node counts",
    );
}

/// Help text with its line wrapping undone: words joined by single spaces.
fn words(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The header's `cluster:` line gives each GPU's memory and bf16 peak (B200 2250 TFLOP/s, GB200
/// 2500), and nothing a user reads said where those numbers, or the link bandwidths and
/// efficiencies behind every time, come from. `--gpu`'s help now names the file that holds each
/// bundled profile with its sources; the test holds it to every profile the help lists having
/// that file, with a source for its peak and its memory.
#[test]
fn gpu_help_names_where_each_profiles_sources_are() {
    let help = words(&stdout_of(&["plan", "--help"]));
    let at = help
        .find("--gpu <NAME|FILE>")
        .expect("--gpu in plan --help");
    let gpu = &help[at..];
    let gpu = &gpu[..gpu.find(" --calibration").unwrap_or(gpu.len())];
    assert!(
        gpu.contains("clusters/NAME.yaml, each with its source there"),
        "{gpu}"
    );
    let listed = gpu
        .split_once("Bundled GPU profile (")
        .and_then(|(_, rest)| rest.split_once(')'))
        .map(|(names, _)| names)
        .expect("the bundled names");
    let names: Vec<&str> = listed.split(", ").collect();
    assert!(names.len() >= 10, "{names:?}");
    for name in names {
        let path = format!("{ROOT}/clusters/{name}.yaml");
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        for key in ["peak_bf16_tflops:", "hbm_capacity_gib:"] {
            let line = text
                .lines()
                .find(|l| l.starts_with(key))
                .unwrap_or_else(|| panic!("{path}: no {key}"));
            let sourced = line.contains('#')
                || text
                    .lines()
                    .any(|l| l.trim_start().starts_with(&format!("- \"{key}")));
            assert!(sourced, "{path}: {line}");
        }
    }
}

/// A researcher validating tpsim asked for one SC'21 run in full (`accuracy --run
/// megatron-sc21-t1-1.7b`) and was refused with "whose table already shows every run in full":
/// the table gives a plan, a step time and a memory total, not the memory, traffic and time
/// breakdown `--run` prints for current-stack runs. The error now says what the table holds and
/// gives the `eval` line that reproduces a run as `accuracy` evaluates it; the test runs that line
/// and holds its step time and memory to the table's row.
#[test]
fn accuracy_run_on_published_runs_gives_the_eval_that_reproduces_one() {
    let r = run(&["accuracy", "--run", "megatron-sc21-t1-1.7b"]);
    common::assert_one_line_error(
        &r,
        &[
            "published-runs file",
            "not the breakdown --run prints",
            "validation/modern_runs.yaml",
        ],
        &["in full;"],
        "accuracy --run on published runs",
    );
    let command = r
        .stderr
        .split_once("e.g. for megatron-sc21-t1-1.7b: tpsim ")
        .map(|(_, c)| c.trim())
        .unwrap_or_else(|| panic!("no eval line in: {}", r.stderr));
    let args: Vec<&str> = command.split_whitespace().collect();
    let eval = stdout_of(&args);
    let number_after = |text: &str, key: &str| -> f64 {
        let line = text
            .lines()
            .find(|l| l.trim_start().starts_with(key))
            .unwrap_or_else(|| panic!("no {key} in:\n{text}"));
        line.trim_start()[key.len()..]
            .split_whitespace()
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no number in {line}"))
    };
    let step = number_after(&eval, "time per step:");
    let memory = number_after(&eval, "total");
    let rows: serde_json::Value =
        serde_json::from_str(&stdout_of(&["accuracy", "--format", "json"])).unwrap();
    let row = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == "megatron-sc21-t1-1.7b")
        .expect("the 1.7B row");
    let predicted = row["predicted_step_s"].as_f64().unwrap();
    assert!(
        (step - predicted).abs() < 0.0005,
        "eval {step} s, accuracy {predicted} s"
    );
    let table_memory = row["predicted_memory_bytes"].as_f64().unwrap() / f64::from(1u32 << 30);
    assert!(
        (memory - table_memory).abs() < 0.05,
        "eval {memory} GiB, accuracy {table_memory} GiB"
    );
}
