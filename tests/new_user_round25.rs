//! Regressions from the twenty-fifth review of valid usage by a new user: an ML infrastructure
//! engineer about to bet a month of cluster time follows the README's first screen, then a
//! frontier team plans a 1.5T dense model on 1,024 GB200 (NVL72 racks cut into 64-GPU segments,
//! 2K and 32K tokens), a team coming from DeepSpeed reads `--framework deepspeed --emit
//! deepspeed` against DeepSpeed's config schema, and a small lab fine-tunes Llama 3 8B and 70B on
//! one node of 8 H100 and on 2 GPUs (each test names the finding).

mod common;
use common::{legend_colours, run};

/// The number after `before` and up to `after` in `text`, as f64.
fn number_between(text: &str, before: &str, after: &str) -> f64 {
    let start = text
        .find(before)
        .unwrap_or_else(|| panic!("no {before:?} in {text}"))
        + before.len();
    let rest = &text[start..];
    let end = rest
        .find(after)
        .unwrap_or_else(|| panic!("no {after:?} after {before:?} in {text}"));
    rest[..end]
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("{:?} after {before:?}: {e}", &rest[..end]))
}

/// Finding: a small lab planning Llama 3 70B on one node of 2 H100 was told "nothing fits ...
/// add nodes, use a larger-memory GPU, or shorten --seq-len", though the weights and Adam states
/// alone (14 bytes per parameter, 920 GiB) outgrow both GPUs together whatever the plan: no
/// sequence length fits, and the line did not say how many GPUs would. It now names the states'
/// size, their share per GPU fully sharded, and the least GPU count that holds them, and drops
/// the --seq-len advice there.
#[test]
fn nothing_fits_says_when_the_states_alone_outgrow_the_cluster_and_how_many_gpus_hold_them() {
    for (gpus, model) in [("2", "llama3-70b"), ("8", "llama3-70b"), ("1", "llama3-8b")] {
        let args = [
            "plan",
            "--model",
            model,
            "--nodes",
            "1",
            "--gpus-per-node",
            gpus,
            "--global-batch",
            "64",
        ];
        let r = run(&args);
        assert_eq!(r.code, 1, "{args:?}: {}", r.stderr);
        let line = r
            .stderr
            .lines()
            .find(|l| l.starts_with("nothing fits:"))
            .unwrap_or_else(|| panic!("{args:?}: no nothing-fits line in {}", r.stderr));
        assert!(
            !line.contains("shorten --seq-len"),
            "{args:?}: a shorter sequence cannot shrink the weights and optimizer states: {line}"
        );
        let states_gib = number_between(line, "optimizer states alone take ", " GiB (");
        let states_words = &line[line.find("alone take ").unwrap()..];
        let bytes_per_param = number_between(states_words, " GiB (", " bytes per parameter");
        let params_b = number_between(line, "bytes per parameter x ", "B parameters");
        // The bytes per parameter are the scenario line's "weights + states".
        assert!(
            r.stdout.contains(&format!(
                "weights + states: {bytes_per_param} bytes per parameter"
            )),
            "{args:?}: {line}\n{}",
            r.stdout
        );
        let gib = 1024f64.powi(3);
        assert!(
            (states_gib - bytes_per_param * params_b * 1e9 / gib).abs() < 0.2 * params_b,
            "{args:?}: {states_gib} GiB is not {bytes_per_param} x {params_b}B: {line}"
        );
        let capacity = number_between(line, "GPUs of ", " GiB hold them");
        let needed = number_between(line, "at least ", " GPUs of");
        assert_eq!(needed, (states_gib / capacity).ceil(), "{args:?}: {line}");
        let given: f64 = gpus.parse().unwrap();
        assert!(needed > given, "{args:?}: {line}");
        assert!(
            !line.contains("1 GPUs"),
            "{args:?}: one GPU is not plural: {line}"
        );
    }
    // Where the states fit and only activations overflow, the --seq-len advice stays.
    let args = [
        "plan",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--gpus-per-node",
        "2",
        "--global-batch",
        "64",
        "--seq-len",
        "262144",
        "--cp",
        "1",
    ];
    let r = run(&args);
    assert_eq!(r.code, 1, "{args:?}: {}", r.stderr);
    assert!(
        r.stderr.contains("shorten --seq-len") && !r.stderr.contains("alone take"),
        "{args:?}: {}",
        r.stderr
    );
}

/// Finding: a platform engineer scripting `plan --format json` on GB200 read
/// `cluster.nvlink_domain_gpus` 64 beside `cluster.rack_nvlink_gpus` 72 and
/// `cluster.sustained_clock_factor` 0.928, none of them in README's JSON section, which promises
/// every quantity named with its unit: which of 64 and 72 the plans used was not said. Every key
/// of the `cluster` object is now named there as `cluster.KEY`.
#[test]
fn readme_json_section_names_every_cluster_field() {
    let args = [
        "plan",
        "--params",
        "1.5T",
        "--gpu",
        "gb200-nvl72",
        "--nodes",
        "256",
        "--gpus-per-node",
        "4",
        "--max-memory-gib",
        "180",
        "--top",
        "1",
        "--format",
        "json",
    ];
    let r = run(&args);
    assert_eq!(r.code, 0, "{args:?}: {}", r.stderr);
    let json: serde_json::Value = serde_json::from_str(&r.stdout).expect("plan's JSON");
    let cluster = json["cluster"].as_object().expect("a cluster object");
    assert_eq!(cluster["nvlink_domain_gpus"], 64, "{cluster:?}");
    assert_eq!(cluster["rack_nvlink_gpus"], 72, "{cluster:?}");
    let readme = std::fs::read_to_string(format!("{}/README.md", common::ROOT)).unwrap();
    let json_section = readme
        .split("### JSON output")
        .nth(1)
        .and_then(|rest| rest.split("\n### ").next())
        .expect("README's JSON output section");
    let missing: Vec<&String> = cluster
        .keys()
        .filter(|k| !json_section.contains(&format!("`cluster.{k}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "README's JSON section does not name cluster.{missing:?}"
    );
}

fn colour_of<'a>(legend: &'a [(String, String)], name: &str, figure: &str) -> &'a str {
    legend
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, c)| c.as_str())
        .unwrap_or_else(|| panic!("no {name:?} in {figure}'s legend: {legend:?}"))
}

/// Finding: a reviewer reading the report of the 1.5T plan on 1,024 GB200 found the optimizer
/// brown in the step-time bars, red in the memory bars and amber in the pipeline timeline, and
/// the timeline's red "exposed DP communication" yellow ("DP grad reduce") in the step bars, the
/// timeline's amber optimizer step then reading as the step bars' yellow DP term; the step bars'
/// legend names, drawn in their own fill colour, were barely legible in yellow and pink. A term
/// now keeps one colour in every figure, and the legend writes its names in black.
#[test]
fn report_figures_give_a_term_one_colour_and_legible_legend_names() {
    let dir = common::scratch("new_user_round25", "report_colours");
    let out = dir.join("report");
    let out_s = out.to_str().unwrap();
    let args = [
        "plan",
        "--params",
        "1.5T",
        "--gpu",
        "gb200-nvl72",
        "--nodes",
        "256",
        "--gpus-per-node",
        "4",
        "--report",
        out_s,
    ];
    let r = run(&args);
    assert_eq!(r.code, 0, "{args:?}: {}", r.stderr);
    let read = |f: &str| std::fs::read_to_string(out.join(f)).unwrap();
    let step = legend_colours(&read("step_time.svg"));
    let memory = legend_colours(&read("memory.svg"));
    let timeline = legend_colours(&read("timeline.svg"));
    let optimizer = colour_of(&step, "optimizer", "step_time.svg");
    assert_eq!(
        optimizer,
        colour_of(&memory, "optimizer", "memory.svg"),
        "optimizer: step {step:?} memory {memory:?}"
    );
    assert_eq!(
        optimizer,
        colour_of(&timeline, "optimizer step", "timeline.svg"),
        "optimizer: step {step:?} timeline {timeline:?}"
    );
    assert_eq!(
        colour_of(&step, "DP grad reduce", "step_time.svg"),
        colour_of(&timeline, "exposed DP grad reduce", "timeline.svg"),
        "DP: step {step:?} timeline {timeline:?}"
    );
    // Within one figure, two terms never share a colour.
    for (figure, legend) in [("step_time.svg", &step), ("memory.svg", &memory)] {
        let mut colours: Vec<&String> = legend.iter().map(|(_, c)| c).collect();
        colours.sort();
        colours.dedup();
        assert_eq!(colours.len(), legend.len(), "{figure}: {legend:?}");
    }
    // The names are black text beside their coloured mark.
    let svg = read("step_time.svg");
    assert!(
        !svg.contains("■ optimizer") && svg.contains(">\noptimizer\n</text>"),
        "step_time.svg's legend still draws its names in their fill colour"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
