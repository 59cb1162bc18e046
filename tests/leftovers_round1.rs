//! Leftovers of the earlier review rounds, round 1: errors whose fix named nothing (a Hugging Face
//! config's key-value heads), a key the input cannot take (`model.head_dim` in a runs file) or a
//! flag beside a plan file (`--sequence-parallel false`); `eval` naming the DP link otherwise than
//! `plan` for the same plan; and a Megatron-LM line for Falcon-7B that prices another model
//! without a word.

mod common;

use common::*;

/// `--hf-config` with `"num_key_value_heads": 3` over 8 attention heads gave the rule and no fix;
/// it now offers a divisor of the heads, in the config's key.
#[test]
fn hf_config_kv_heads_that_do_not_divide_the_heads_get_a_divisor() {
    let dir = scratch("leftovers1", "kv3");
    let config = r#"{"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 4096,
        "num_attention_heads": 8, "num_key_value_heads": 3, "intermediate_size": 14336,
        "vocab_size": 128256, "max_position_embeddings": 8192}"#;
    std::fs::write(dir.join("config.json"), config).unwrap();
    let r = run_in(
        &dir,
        &[
            "eval",
            "--hf-config",
            "config.json",
            "--nodes",
            "1",
            "--tp",
            "1",
            "--pp",
            "1",
        ],
    );
    assert_one_line_error(
        &r,
        &[
            "\"num_key_value_heads\" 3",
            "\"num_attention_heads\" 8",
            "give a divisor of 8, e.g. \"num_key_value_heads\": 2",
        ],
        &["--kv-heads"],
        "kv heads 3 of 8",
    );
}

/// A config whose hidden size the heads do not divide names a head count that does.
#[test]
fn hf_config_hidden_not_divisible_by_heads_gets_a_head_count() {
    let dir = scratch("leftovers1", "hidden");
    let config = r#"{"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 4100,
        "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
        "vocab_size": 128256, "max_position_embeddings": 8192}"#;
    std::fs::write(dir.join("config.json"), config).unwrap();
    let r = run_in(
        &dir,
        &[
            "eval",
            "--hf-config",
            "config.json",
            "--nodes",
            "1",
            "--tp",
            "1",
            "--pp",
            "1",
        ],
    );
    assert_one_line_error(
        &r,
        &["\"hidden_size\" 4100", "e.g. \"num_attention_heads\": 25"],
        &["--heads", "--head-dim"],
        "hidden 4100 over 32 heads",
    );
}

/// A published-runs file's model with a hidden size its heads do not divide: the fix offered
/// `model.head_dim`, a key the file refuses; it now offers only the head count.
#[test]
fn a_published_run_with_indivisible_heads_is_not_offered_head_dim() {
    let run = "- id: r1
  completeness: full_plan
  model: {arch: GPT, layers: 24, hidden: 2300, heads: 24, kv_heads: null, ffn_hidden: 9216, vocab: 51200, seq_len: 2048}
  hardware: {gpu: A100, gpus_per_node: 8, num_gpus: 32}
  plan: {tp: 1, pp: 1, dp: 32, micro_batch_size: 16, global_batch_size: 512, recompute: full, virtual_pipeline_stages: null, sequence_parallel: null, zero_stage: null}
  results: {iteration_time_s: 3.5}
";
    let dir = scratch("leftovers1", "published");
    std::fs::write(dir.join("runs.yaml"), run).unwrap();
    let r = run_in(&dir, &["accuracy", "--runs", "runs.yaml"]);
    assert_one_line_error(
        &r,
        &[
            "model.hidden: 2300",
            "model.heads: 24",
            "e.g. model.heads: 23",
        ],
        &["head_dim", "--head-dim", "--hidden"],
        "published run hidden 2300 / 24 heads",
    );
    // The key the fix names is one the file takes: the run with it evaluates.
    std::fs::write(
        dir.join("runs.yaml"),
        run.replace("hidden: 2300, heads: 24", "hidden: 2300, heads: 23"),
    )
    .unwrap();
    let r = run_in(&dir, &["accuracy", "--runs", "runs.yaml"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
}

/// The same in a current-stack runs file (validation/modern_runs.yaml's format), whose
/// `model.head_dim` is carried for people and never read: the run's why-not names the file's
/// keys, not `--hidden`/`--heads`/`--head-dim`.
#[test]
fn a_modern_run_with_indivisible_heads_says_the_files_keys() {
    const ID: &str = "mbridge-25.11-pretrain-llama31_405b-gb300-256g-fp8-gbs1536";
    let text = std::fs::read_to_string(format!("{ROOT}/validation/modern_runs.yaml")).unwrap();
    let at = text
        .find(&format!("- id: {ID}"))
        .expect("the run is in the file");
    let hidden = at + text[at..].find("    hidden: 16384").unwrap();
    let spoiled = format!(
        "{}    hidden: 16380{}",
        &text[..hidden],
        &text[hidden + "    hidden: 16384".len()..]
    );
    let dir = scratch("leftovers1", "modern");
    std::fs::write(dir.join("runs.yaml"), spoiled).unwrap();
    let r = run_in(&dir, &["accuracy", "--runs", "runs.yaml", "--run", ID]);
    assert!(
        r.stderr
            .contains("model.hidden: 16380 is not divisible by model.heads: 128")
            && r.stderr.contains("e.g. model.heads: 126")
            && !r.stderr.contains("head_dim")
            && !r.stderr.contains("--head"),
        "{}",
        r.stderr
    );
}

/// The bundled plan file with its sequence length made 2044, which tp 8 under sequence
/// parallelism does not split into whole shards.
fn sp_plan(dir: &std::path::Path) -> String {
    let text = bundled_plan_with("seq_len: 2048", "seq_len: 2044")
        .replace("  seq_len: 2048", "  seq_len: 2044");
    assert!(text.contains("sequence_parallel: true") && text.contains("tp: 8"));
    std::fs::write(dir.join("plan.yaml"), text).unwrap();
    "plan.yaml".to_string()
}

/// A plan file under the sequence-parallel whole-shard rule: the fix said
/// `--sequence-parallel false`; it now names the file's key, as the file's other errors do.
#[test]
fn a_plan_files_sequence_parallel_rule_names_its_key() {
    let dir = scratch("leftovers1", "sp");
    let plan = sp_plan(&dir);
    let r = run_in(&dir, &["eval", "--plan", &plan]);
    assert_one_line_error(
        &r,
        &[
            "sequence_parallel: true with tp: 8",
            "2044",
            "e.g. seq_len: 2048",
            "or sequence_parallel: false",
        ],
        &["--sequence-parallel"],
        "eval --plan with sp and seq 2044",
    );
    // A --sequence-parallel typed next to the file sets it over the file's key: that flag stays.
    let r = run_in(
        &dir,
        &["eval", "--plan", &plan, "--sequence-parallel", "true"],
    );
    assert_one_line_error(
        &r,
        &[
            "(also --sequence-parallel true)",
            "or --sequence-parallel false",
        ],
        &["or sequence_parallel: false"],
        "eval --plan --sequence-parallel true",
    );
    // `report` and `compare` read plan files too.
    let r = run_in(&dir, &["report", &plan, "--out", "report"]);
    assert_one_line_error(
        &r,
        &["sequence_parallel: true", "or sequence_parallel: false"],
        &["--sequence-parallel"],
        "report of the plan",
    );
    let r = run_in(&dir, &["compare", "--plan", &plan, "--plan", &plan]);
    assert_one_line_error(
        &r,
        &["sequence_parallel: true", "or sequence_parallel: false"],
        &["--sequence-parallel"],
        "compare of the plan",
    );
}

/// `plan`'s "why the best plan" says DP traffic runs "on network and NVLink (4 ranks per node,
/// ...)"; `eval` of the saved plan said "on network". Both now say the same.
#[test]
fn eval_names_the_dp_link_as_plan_does() {
    let dir = scratch("leftovers1", "dp");
    let shape = [
        "--model",
        "deepseek-v3",
        "--nodes",
        "256",
        "--global-batch",
        "4096",
        "--seq-len",
        "4096",
    ];
    let mut args = vec!["plan"];
    args.extend(shape);
    args.extend(["--top", "1", "--save", "best.yaml"]);
    let planned = run_in(&dir, &args);
    assert_eq!(planned.code, 0, "{}", planned.stderr);
    const WORDS: &str = "network and NVLink";
    const DETAIL: &str =
        "4 ranks per node, each with its own NIC; the ring's hops inside it stay on NVLink";
    let why = planned
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with("DP "))
        .expect("a DP line in why the best plan");
    assert!(
        why.contains(&format!("on {WORDS} ({DETAIL})")),
        "{}",
        planned.stdout
    );
    let evaluated = run_in(&dir, &["eval", "--plan", "best.yaml"]);
    assert_eq!(evaluated.code, 0, "{}", evaluated.stderr);
    let lines: Vec<&str> = evaluated.stdout.lines().collect();
    let dp = lines
        .iter()
        .find(|l| l.starts_with("  DP "))
        .expect("a DP line in the communication breakdown");
    assert!(
        dp.contains(&format!("on {WORDS} ")) && dp.ends_with(&format!("; {DETAIL}")),
        "{dp}"
    );
    // The columns still line up: every link is padded to the widest, so each line's time
    // ("x.xxx s") starts where the DP line's does.
    let time_at = |line: &str| line.find(" s   ").expect("a time column");
    let column = time_at(dp);
    for line in lines
        .iter()
        .filter(|l| l.starts_with("  ") && l.contains(" GB on "))
    {
        assert_eq!(time_at(line), column, "{line}\n{dp}");
    }
    // The JSON keeps its link field's name and value.
    let v = json(&[
        "eval",
        "--plan",
        &format!("{}", dir.join("best.yaml").display()),
        "--format",
        "json",
    ]);
    assert_eq!(
        v["plans"][0]["comm"]["dp"]["link"], "network",
        "{}",
        v["plans"][0]["comm"]["dp"]
    );
}

/// Falcon-7B's attention and MLP share one input norm, which no Megatron-LM argument sets: the
/// emitted line, read back, counted 290,816 more parameters than the plan without a word. The
/// emitter now says so, with the count the read-back shows.
#[test]
fn falcon_emitted_for_megatron_names_the_shared_norm_it_cannot_carry() {
    let flags = [
        "--hf-config",
        "models/hf/falcon-7b.json",
        "--nodes",
        "1",
        "--tp",
        "1",
        "--pp",
        "1",
        "--global-batch",
        "64",
    ];
    let mut args = vec!["eval"];
    args.extend(flags);
    args.extend(["--emit", "megatron"]);
    let emitted = run(&args);
    assert!(emitted.code == 0 || emitted.code == 1, "{}", emitted.stderr);
    let note = emitted
        .stderr
        .lines()
        .find(|l| l.contains("share one input norm"))
        .unwrap_or_else(|| panic!("no shared-norm note: {}", emitted.stderr));
    assert!(
        note.starts_with("note: ")
            && note.contains("Megatron-LM has no argument for")
            && note.contains("290,816 more parameters (32 layers x 9,088)"),
        "{note}"
    );
    let line = emitted.stdout.trim();
    let mut planned = vec!["eval"];
    planned.extend(flags);
    planned.extend(["--format", "json"]);
    let planned = json(&planned)["model"]["params"].as_f64().unwrap();
    let back = json(&[
        "eval",
        "--nodes",
        "1",
        "--format",
        "json",
        "--megatron-args",
        line,
    ])["model"]["params"]
        .as_f64()
        .unwrap();
    assert_eq!(back - planned, 290_816.0);
    // A model without a shared norm gets no such note.
    let llama = run(&[
        "eval",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--tp",
        "1",
        "--pp",
        "1",
        "--emit",
        "megatron",
    ]);
    assert!(!llama.stderr.contains("input norm"), "{}", llama.stderr);
}

/// A pinned `--cp` is searched whatever share of the sequence it leaves each rank: `plan --cp 8`
/// on an 8K sequence (1,024 tokens per rank, below the search's own 2,048 floor) refused and sent
/// the user to `eval`; the floor prunes the search, it does not overrule a degree the user chose.
#[test]
fn a_pinned_cp_below_the_search_floor_is_searched() {
    let r = run(&[
        "plan",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--cp",
        "8",
        "--seq-len",
        "8192",
        "--global-batch",
        "8",
        "--top",
        "1",
        "--format",
        "json",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let json: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(json["plans"][0]["cp"], 8, "{}", r.stdout);
    // The other degrees are enumerated and counted as ruled out by the pin, as before.
    assert!(
        json["search"]["infeasible_by_reason"]["ruled_out_by_pins"]
            .as_u64()
            .is_some_and(|n| n > 0),
        "{}",
        r.stdout
    );
}
