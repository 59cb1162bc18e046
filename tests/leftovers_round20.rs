//! Leftovers of the twentieth session's rounds (found, not fixed): a bundled model's assumed
//! sequence length told as its training length, a default-batch note that called `--seq-len`'s
//! length the model's, an MXFP8 training line without its recipe, `plan --save` dropping a bundled
//! model's description and published counts, a sweep's memory margin in its table only, Hugging
//! Face errors naming a flag and a model file's key, a runs-file batch rule said twice, and a
//! Megatron-LM launch line priced as torchtitan.

mod common;

use common::*;
use serde_json::Value;

const SUITE: &str = "leftovers20";

/// The model line (stdout) of a command.
fn model_line(r: &Run) -> &str {
    r.stdout
        .lines()
        .find(|l| l.starts_with("model "))
        .unwrap_or_else(|| panic!("no model line:\n{}\n{}", r.stdout, r.stderr))
}

/// Mixtral 8x22B and Kimi K2 publish no pre-training length; their specs' 4096 is an assumption,
/// which the model line told as "the bundled model's training length". A spec with a published
/// length (Llama 3 8B's 8192) is still told as one.
#[test]
fn an_assumed_bundled_sequence_length_is_said_as_assumed() {
    for (model, nodes) in [("mixtral-8x22b", "8"), ("kimi-k2", "32")] {
        let r = run(&["plan", "--model", model, "--nodes", nodes, "--top", "1"]);
        assert_eq!(r.code, 0, "{model}: {}", r.stderr);
        let line = model_line(&r);
        assert!(
            line.contains("--seq-len not given: 4096 tokens, assumed, since no training length is published for this model"),
            "{model}: {line}"
        );
        assert!(!line.contains("training length,"), "{model}: {line}");
        assert!(
            r.stderr.contains(
                "in sequences of the 4096 tokens assumed for this model, which publishes none"
            ),
            "{model}: {}",
            r.stderr
        );
    }
    let r = run(&["plan", "--model", "llama3-8b", "--nodes", "1", "--top", "1"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        model_line(&r).contains("8192 tokens, the bundled model's training length"),
        "{}",
        r.stdout
    );
}

/// The default-batch note said "at this model's 8192 tokens" where `--seq-len 8192` gave them.
#[test]
fn the_default_batch_note_says_whose_sequence_length_it_is() {
    let note = |extra: &[&str]| {
        let mut args = vec!["plan", "--model", "llama3-8b", "--nodes", "1", "--top", "1"];
        args.extend(extra);
        let r = run(&args);
        assert_eq!(r.code, 0, "{extra:?}: {}", r.stderr);
        r.stderr
            .lines()
            .find(|l| l.starts_with("note: --global-batch not given"))
            .unwrap_or_else(|| panic!("{extra:?}: no batch note: {}", r.stderr))
            .to_string()
    };
    let given = note(&["--seq-len", "8192"]);
    assert!(given.contains("in sequences of --seq-len 8192"), "{given}");
    assert!(!given.contains("this model's"), "{given}");
    let own = note(&[]);
    assert!(
        own.contains("in sequences of this model's 8192 tokens"),
        "{own}"
    );
    // On a shape of the user's own, too: --params with --seq-len.
    let r = run(&[
        "plan",
        "--params",
        "7B",
        "--nodes",
        "1",
        "--seq-len",
        "4096",
        "--top",
        "1",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stderr.contains("in sequences of --seq-len 4096)"),
        "{}",
        r.stderr
    );
}

/// Under `--precision fp8` the training line names the scaling recipe; under mxfp8 it named none.
#[test]
fn the_mxfp8_training_line_names_its_block_scaling() {
    let r = run(&[
        "eval",
        "--model",
        "llama3-8b",
        "--gpu",
        "b200-sxm-180g",
        "--nodes",
        "1",
        "--tp",
        "1",
        "--global-batch",
        "64",
        "--zero",
        "1",
        "--precision",
        "mxfp8",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let training = r
        .stdout
        .lines()
        .find(|l| l.starts_with("training: "))
        .unwrap();
    assert!(
        training.ends_with("; mxfp8 with block scaling (one E8M0 scale per 32 elements, OCP MX)"),
        "{training}"
    );
    // Not said where no plan trains in it.
    let bf16 = run(&[
        "eval",
        "--model",
        "llama3-8b",
        "--gpu",
        "b200-sxm-180g",
        "--nodes",
        "1",
        "--tp",
        "1",
        "--global-batch",
        "64",
        "--zero",
        "1",
    ]);
    assert_eq!(bf16.code, 0, "{}", bf16.stderr);
    assert!(!bf16.stdout.contains("E8M0"), "{}", bf16.stdout);
}

/// `plan --save` of a bundled model wrote `description: null`, `source: null` and
/// `published_params_b: null`; they are carried now (and the assumed length with them), and the
/// saved plan reads back as the same model.
#[test]
fn a_saved_bundled_model_keeps_its_description_and_published_counts() {
    let dir = scratch(SUITE, "save");
    let r = run_in(
        &dir,
        &[
            "plan",
            "--model",
            "mixtral-8x22b",
            "--nodes",
            "8",
            "--save",
            "p.yaml",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let text = std::fs::read_to_string(dir.join("p.yaml")).unwrap();
    let saved: yaml_serde::Value = yaml_serde::from_str(&text).unwrap();
    let model = &saved["model"];
    assert_eq!(
        model["description"].as_str(),
        Some("Mixtral 8x22B (Mistral AI 2024)"),
        "{text}"
    );
    assert!(
        model["source"]
            .as_str()
            .is_some_and(|s| s.contains("mistralai/Mixtral-8x22B-v0.1")),
        "{text}"
    );
    assert_eq!(model["published_params_b"].as_f64(), Some(141.0), "{text}");
    assert_eq!(
        model["published_active_params_b"].as_f64(),
        Some(39.0),
        "{text}"
    );
    assert_eq!(model["seq_len_assumed"].as_bool(), Some(true), "{text}");
    let back = run_in(&dir, &["eval", "--plan", "p.yaml", "--format", "json"]);
    assert_eq!(back.code, 0, "{}", back.stderr);
    // A length the user gave is no assumption of the spec's, and a shape flag over the model
    // makes another model, whose description the spec's would misstate.
    let r = run_in(
        &dir,
        &[
            "plan",
            "--model",
            "mixtral-8x22b",
            "--nodes",
            "8",
            "--seq-len",
            "4096",
            "--save",
            "given.yaml",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let given = std::fs::read_to_string(dir.join("given.yaml")).unwrap();
    assert!(!given.contains("seq_len_assumed"), "{given}");
    assert!(given.contains("description: Mixtral 8x22B"), "{given}");
    let r = run_in(
        &dir,
        &[
            "plan",
            "--model",
            "llama3-8b",
            "--layers",
            "16",
            "--nodes",
            "1",
            "--save",
            "shaped.yaml",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let shaped = std::fs::read_to_string(dir.join("shaped.yaml")).unwrap();
    assert!(shaped.contains("description: null"), "{shaped}");
    let _ = std::fs::remove_dir_all(dir);
}

/// A sweep's table says `memory range:` with the `--max-memory-gib` that keeps tpsim's memory
/// margin; its JSON, CSV and chart carried nothing of it. They carry the same numbers now.
#[test]
fn a_sweeps_memory_margin_is_in_its_json_csv_and_chart() {
    let base = [
        "sweep", "--params", "175B", "--axis", "nodes", "--values", "16,32",
    ];
    let table = run(&base);
    assert_eq!(table.code, 0, "{}", table.stderr);
    let line = table
        .stdout
        .lines()
        .find(|l| l.starts_with("memory range: "))
        .unwrap_or_else(|| panic!("no memory range line: {}", table.stdout));
    assert!(
        // Both since physics round 28 (torchtitan's peaks up to 18% above tpsim's).
        line.contains("nodes 16 (") && line.contains("nodes 32 ("),
        "{line}"
    );
    let keep = line
        .split("--max-memory-gib ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no limit in: {line}"));

    let mut args = base.to_vec();
    args.extend(["--format", "json"]);
    let sweep: Value = json(&args);
    let rows = sweep["rows"].as_array().unwrap();
    let memory = |i: usize| &rows[i]["memory"];
    assert_eq!(memory(0)["max_memory_gib_for_margin"].as_f64(), Some(keep));
    assert_eq!(memory(1)["max_memory_gib_for_margin"].as_f64(), Some(keep));
    for i in 0..2 {
        let total = memory(i)["total_bytes"].as_f64().unwrap();
        let high = memory(i)["total_bytes_high"].as_f64().unwrap();
        assert!(high > total, "row {i}: {high} <= {total}");
        assert!(
            memory(i)["total_bytes_range_basis"]
                .as_str()
                .is_some_and(|b| b.starts_with("95th percentile")),
            "{}",
            memory(i)
        );
    }
    // The high end at 16 nodes is the GiB the table's line prints ("87.1 there").
    let there = format!(
        "{:.1} there",
        memory(0)["total_bytes_high"].as_f64().unwrap() / (1u64 << 30) as f64
    );
    assert!(line.contains(&there), "{there} not in: {line}");

    let mut args = base.to_vec();
    args.extend(["--format", "csv"]);
    let csv = run(&args);
    assert_eq!(csv.code, 0, "{}", csv.stderr);
    let lines: Vec<&str> = csv.stdout.lines().collect();
    let header: Vec<&str> = lines[0].split(',').collect();
    let column = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let row: Vec<String> = csv_cells(lines[1]);
    assert_eq!(
        row[column("memory.max_memory_gib_for_margin")]
            .parse::<f64>()
            .ok(),
        Some(keep),
        "{}",
        csv.stdout
    );
    let high: f64 = row[column("memory.total_bytes_high")].parse().unwrap();
    assert!(
        (high - memory(0)["total_bytes_high"].as_f64().unwrap()).abs() < 1.0,
        "{}",
        csv.stdout
    );

    let dir = scratch(SUITE, "chart");
    let mut args = base.to_vec();
    args.extend(["--chart", "s.svg"]);
    let r = run_in(&dir, &args);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let svg = std::fs::read_to_string(dir.join("s.svg")).unwrap();
    assert!(
        svg.contains("free memory (GiB), bars"),
        "no memory-range panel title"
    );
    // Two points, a bar and two caps each, in red.
    let red_bars = svg
        .split("<polyline")
        .skip(1)
        .filter(|el| {
            let tag = el.split('>').next().unwrap_or_default();
            tag.contains(r##"stroke="#FF0000""##) && tag.contains("opacity=\"0.6\"")
        })
        .count();
    assert_eq!(red_bars, 6, "{red_bars} memory-range strokes");
    let _ = std::fs::remove_dir_all(dir);
}

/// A Nemotron-H config whose pattern is shorter than its layers was told "give --layers 4", and one
/// with another convolution width was told "give mamba_conv_kernel 4" under `--emit`: neither is
/// a key of the config.
#[test]
fn nemotron_h_config_errors_name_the_configs_keys() {
    let dir = scratch(SUITE, "hf");
    let five =
        nemotron_h_moe_config("").replace("\"num_hidden_layers\": 4", "\"num_hidden_layers\": 5");
    assert!(five.contains("\"num_hidden_layers\": 5"));
    let r = eval_hf(&dir, "five.json", &five);
    assert_one_line_error(
        &r,
        &[
            "has 4 symbols but the model has 5 layers",
            "give \"num_hidden_layers\": 4 or a \"hybrid_override_pattern\" of 5 symbols",
        ],
        &["--layers"],
        "pattern against num_hidden_layers",
    );
    std::fs::write(
        dir.join("conv.json"),
        nemotron_h_moe_config(", \"conv_kernel\": 3"),
    )
    .unwrap();
    let r = run_in(
        &dir,
        &[
            "eval",
            "--hf-config",
            "conv.json",
            "--nodes",
            "1",
            "--tp",
            "1",
            "--global-batch",
            "64",
            "--emit",
            "megatron",
        ],
    );
    assert_one_line_error(
        &r,
        &["convolution 3 wide", "\"conv_kernel\""],
        &["give mamba_conv_kernel"],
        "conv kernel under --emit",
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// A runs-file row whose gbs its dp does not divide said the rule twice: "plan.gbs: 129 is not
/// divisible by plan.dp: 8 x plan.mbs: 2 = 16; valid micro-batches for this dp: none: plan.gbs:
/// 129 is not divisible by plan.dp: 8; ...". Once now, with the fix, as `eval` says it.
#[test]
fn a_runs_file_batch_that_dp_does_not_divide_is_said_once() {
    let dir = scratch(SUITE, "runs");
    std::fs::write(
        dir.join("runs.yaml"),
        "schema_version: 1
model_catalog: {}
runs:
- id: mbridge-25.11-pretrain-llama3_8b-gb300-8g-fp8-gbs129
  task: pretrain
  model: {name: Llama 3 8B, layers: 32, hidden: 4096, heads: 32, kv_heads: 8, ffn_hidden: 14336, vocab: 128256, seq_len: 8192}
  hardware: {gpu: GB300, num_gpus: 8, gpus_per_node: 4}
  plan: {tp: 1, pp: 1, cp: 1, ep: 1, dp: 8, mbs: 2, gbs: 129, precision: fp8, precision_raw: FP8-CS}
  results: {tokens_per_s_per_gpu: 37556}
",
    )
    .unwrap();
    let out = {
        let r = run_in(
            &dir,
            &["accuracy", "--runs", "runs.yaml", "--format", "json"],
        );
        assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
        r.stdout
    };
    let note = out
        .lines()
        .find(|l| l.contains("\"note\""))
        .unwrap_or_else(|| panic!("no note: {out}"));
    assert_eq!(note.matches("not divisible").count(), 1, "{note}");
    assert!(
        note.contains("plan.gbs: 129 is not divisible by plan.dp: 8, so no micro-batch size splits it; give a multiple of 8 (e.g. plan.gbs: 136)"),
        "{note}"
    );
    // `eval` says the same rule in its flags.
    let r = run(&[
        "eval",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--tp",
        "1",
        "--global-batch",
        "129",
        "--micro-batch",
        "2",
    ]);
    assert_one_line_error(
        &r,
        &["--global-batch 129 is not divisible by --dp 8, so no micro-batch size splits it"],
        &["valid micro-batches"],
        "eval",
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// `--framework torchtitan` beside a Megatron-LM launch line priced the line with torchtitan's
/// kernels under the line's Megatron overlap switches, a run no framework makes; refused now.
/// DeepSpeed stays: Megatron-DeepSpeed takes Megatron-LM's arguments.
#[test]
fn a_megatron_launch_line_is_not_priced_as_torchtitan() {
    let line = "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096 --micro-batch-size 1 --global-batch-size 64 --position-embedding-type rope --bf16 --tensor-model-parallel-size 2";
    let with = |framework: &str| {
        run(&[
            "eval",
            "--nodes",
            "1",
            "--framework",
            framework,
            "--megatron-args",
            line,
        ])
    };
    assert_one_line_error(
        &with("torchtitan"),
        &[
            "--framework torchtitan beside --megatron-args",
            "runs Megatron-Core",
            "drop --framework torchtitan",
        ],
        &[],
        "torchtitan",
    );
    for framework in ["deepspeed", "megatron-core", "megatron-lm-2021"] {
        let r = with(framework);
        assert!(r.code == 0 || r.code == 1, "{framework}: {}", r.stderr);
        assert!(
            r.stdout.contains(&format!("as {framework} runs it")),
            "{framework}: {}",
            r.stdout
        );
    }
}
