//! Regressions from the twenty-third review of valid usage by a new user: an ML infrastructure
//! engineer about to bet a month of cluster time follows the README's first screen, then a team
//! whose codebase fixes TP 8 and PP 4 pins them in `plan` (then also the micro-batch, ZeRO and
//! recompute) and evaluates the winner, a Hugging Face user plans Qwen2.5-72B, Mistral Large 2 and
//! Gemma-2 27B from their config.json, `--emit megatron` and `--emit torchtitan` are read against
//! Megatron-LM's and torchtitan's arguments, a 7B model is planned on one node of A100 40 GB, and
//! `eval --format json` is fed to a dashboard (each test names the finding).

mod common;
use common::{ROOT, run};

fn stdout_of(args: &[&str]) -> String {
    let r = run(args);
    assert_eq!(r.code, 0, "{args:?}: {}", r.stderr);
    r.stdout
}

fn json_of(args: &[&str]) -> serde_json::Value {
    let mut all = args.to_vec();
    all.extend(["--format", "json"]);
    serde_json::from_str(&stdout_of(&all)).expect("JSON output")
}

/// One small plan, as `eval` flags (7B on one node of 8 H100).
const EVAL_7B: [&str; 11] = [
    "eval",
    "--params",
    "7B",
    "--nodes",
    "1",
    "--global-batch",
    "64",
    "--tp",
    "2",
    "--zero",
    "1",
];

/// The plan table's columns are named `mb` and `sp`, and `eval`'s own note says "a `tpsim plan`
/// row was ranked with the values in its sp column: give that flag"; a user who typed the column
/// as a flag (`eval ... --mb 2 --sp`, `plan ... --sp`) got clap's "unexpected argument '--sp'
/// found, tip: a similar argument exists: '--moe-dispatcher'" (and '--moe-imbalance' for `--mb`):
/// an MoE setting offered for a dense model's micro-batch. Both columns are now flag aliases of
/// `--micro-batch` and `--sequence-parallel` on `plan` and `eval`, priced the same as the long
/// names.
#[test]
fn the_tables_mb_and_sp_columns_are_flags_of_plan_and_eval() {
    let base = EVAL_7B.to_vec();
    let mut long = base.clone();
    long.extend(["--micro-batch", "2", "--sequence-parallel"]);
    let mut short = base.clone();
    short.extend(["--mb", "2", "--sp"]);
    let (a, b) = (json_of(&long), json_of(&short));
    let (a, b) = (&a["plans"][0], &b["plans"][0]);
    assert_eq!(b["micro_batch"], 2, "{b}");
    assert_eq!(b["sequence_parallel"], true, "{b}");
    assert_eq!(a["time"]["step_s"], b["time"]["step_s"]);
    assert_eq!(a["memory"]["total_bytes"], b["memory"]["total_bytes"]);
    // `--sp false` takes the value as the long name does.
    let mut off = base.clone();
    off.extend(["--sp", "false"]);
    assert_eq!(json_of(&off)["plans"][0]["sequence_parallel"], false);

    // `plan` pins them.
    let pinned = json_of(&[
        "plan",
        "--params",
        "7B",
        "--nodes",
        "1",
        "--global-batch",
        "64",
        "--mb",
        "4",
        "--sp",
        "false",
        "--top",
        "3",
    ]);
    let plans = pinned["plans"].as_array().expect("plans");
    assert!(!plans.is_empty(), "{pinned}");
    for p in plans {
        assert_eq!(p["micro_batch"], 4, "{p}");
        assert_eq!(p["sequence_parallel"], false, "{p}");
    }
    // Both helps name the short forms.
    for cmd in ["plan", "eval"] {
        let help = stdout_of(&[cmd, "--help"]);
        assert!(help.contains("--mb"), "{cmd} --help:\n{help}");
        assert!(help.contains("--sp"), "{cmd} --help:\n{help}");
    }
}

/// A team whose codebase fixes TP 8 and PP 4 pinned them: `plan` printed
/// "search: 124058 candidates, 1381 feasible, infeasible: out_of_memory 4699, ruled_out_by_pins
/// 117978" and nothing said which values were pinned, so reading what was searched meant
/// reconstructing the pins from the table's columns (and the rows show cp 2 beside cp 1: was cp
/// pinned too?). Pinning `--recompute selective` besides made the count of candidates grow
/// (153852), with no word why. `plan` now names the pins under the search line, with the count
/// `ruled_out_by_pins` holds, and says that a pinned selective recompute adds the plans an
/// unpinned search leaves out; a search without pins prints no such line. The README quotes the
/// line for this command, checked here against the output.
#[test]
fn a_pinned_plan_names_its_pins_and_what_they_ruled_out() {
    let args = [
        "plan",
        "--model",
        "llama3-70b",
        "--nodes",
        "8",
        "--tp",
        "8",
        "--pp",
        "4",
        "--top",
        "2",
    ];
    let out = stdout_of(&args);
    let lines: Vec<&str> = out.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.starts_with("search: "))
        .unwrap_or_else(|| panic!("no search line:\n{out}"));
    let pinned = lines[at + 1];
    assert!(
        pinned.starts_with("pinned: --tp 8 --pp 4 ("),
        "the line under search: {pinned}\n{out}"
    );
    // The count it names is the search line's own.
    let ruled: u64 = lines[at]
        .split("ruled_out_by_pins ")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no ruled_out_by_pins count: {}", lines[at]));
    assert!(ruled > 0, "{}", lines[at]);
    assert!(
        pinned.contains(&format!("ruled_out_by_pins counts the {ruled} candidates")),
        "{pinned}"
    );
    // The README quotes this very line.
    let readme = std::fs::read_to_string(format!("{ROOT}/README.md")).expect("README");
    assert!(
        readme.contains(&format!("`{pinned}`")),
        "README does not quote `{pinned}`"
    );

    // More pins: each named as its flag, and the selective note where it explains the count.
    let out = stdout_of(&[
        "plan",
        "--model",
        "llama3-70b",
        "--nodes",
        "8",
        "--tp",
        "8",
        "--pp",
        "4",
        "--micro-batch",
        "2",
        "--zero",
        "1",
        "--recompute",
        "selective",
        "--top",
        "1",
    ]);
    let pinned = out
        .lines()
        .find(|l| l.starts_with("pinned: "))
        .unwrap_or_else(|| panic!("no pinned line:\n{out}"));
    for flag in [
        "--tp 8",
        "--pp 4",
        "--micro-batch 2",
        "--zero 1",
        "--recompute selective",
    ] {
        assert!(pinned.contains(flag), "{flag} not in {pinned}");
    }
    assert!(
        pinned.contains("also adds the selective plans an unpinned search leaves out"),
        "{pinned}"
    );

    // Without pins, no such line.
    let out = stdout_of(&[
        "plan",
        "--model",
        "llama3-70b",
        "--nodes",
        "8",
        "--top",
        "1",
    ]);
    assert!(
        !out.lines().any(|l| l.starts_with("pinned: ")),
        "an unpinned search printed a pinned line:\n{out}"
    );
}

/// `plan --tp 8 --pp 4 --report DIR` wrote a page whose Search paragraph read the same bare
/// counts ("ruled_out_by_pins 117978") with no word of the pins, so a report handed to a team
/// lead did not say which dimensions were fixed. The page now carries the `pinned:` line under
/// its search line, as the table does; a report of an unpinned search carries none.
#[test]
fn a_pinned_plans_report_names_its_pins() {
    let dir = common::scratch("new_user_round23", "pinned-report");
    let dir = dir.to_str().expect("utf-8 path");
    let args = [
        "plan",
        "--params",
        "7B",
        "--nodes",
        "1",
        "--global-batch",
        "64",
        "--tp",
        "2",
        "--top",
        "2",
        "--report",
        dir,
    ];
    let out = stdout_of(&args);
    let pinned = out
        .lines()
        .find(|l| l.starts_with("pinned: --tp 2 ("))
        .unwrap_or_else(|| panic!("no pinned line:\n{out}"));
    let html = std::fs::read_to_string(format!("{dir}/index.html")).expect("index.html");
    // The page escapes HTML; the line has no character that changes.
    assert!(html.contains(pinned), "the report lacks `{pinned}`");

    let unpinned = common::scratch("new_user_round23", "unpinned-report");
    let unpinned = unpinned.to_str().expect("utf-8 path");
    let _ = stdout_of(&[
        "plan",
        "--params",
        "7B",
        "--nodes",
        "1",
        "--global-batch",
        "64",
        "--top",
        "2",
        "--report",
        unpinned,
    ]);
    let html = std::fs::read_to_string(format!("{unpinned}/index.html")).expect("index.html");
    assert!(!html.contains("pinned: "), "an unpinned report names pins");
}

/// A Qwen2.5-72B-shaped config.json with `"use_sliding_window": true` was refused ("Qwen's
/// sliding window (on the layers from \"max_window_layers\" on) is not modelled") although its
/// `"max_window_layers"` was 80 of 80 layers (Qwen2-7B-Instruct ships 28 of 28): transformers' Qwen2Config makes layer i slide only
/// where i >= max_window_layers and `sliding_window` is set, so no layer of it slides. Such a
/// config (or one whose window is null) now reads as full attention, the same model as with the
/// switch off; one whose window reaches some layers is still refused by name.
#[test]
fn a_qwen_config_whose_window_reaches_no_layer_is_read_as_full_attention() {
    let dir = common::scratch("new_user_round23", "qwen-window");
    let config = |use_window: bool, from: u32, window: &str| {
        let text = format!(
            r#"{{"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_act": "silu",
  "hidden_size": 8192, "intermediate_size": 29568, "max_position_embeddings": 32768,
  "max_window_layers": {from}, "num_attention_heads": 64, "num_hidden_layers": 80,
  "num_key_value_heads": 8, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
  "sliding_window": {window}, "tie_word_embeddings": false, "use_sliding_window": {use_window},
  "vocab_size": 152064}}"#
        );
        let path = dir.join(format!("qwen-{use_window}-{from}-{window}.json"));
        std::fs::write(&path, text).expect("config written");
        path.to_str().expect("utf-8 path").to_string()
    };
    let step = |path: &str| {
        json_of(&[
            "eval",
            "--hf-config",
            path,
            "--nodes",
            "8",
            "--tp",
            "8",
            "--pp",
            "4",
            "--zero",
            "1",
            "--sequence-parallel",
            "--global-batch",
            "64",
        ])["plans"][0]["time"]["step_s"]
            .as_f64()
            .expect("step_s")
    };
    let off = step(&config(false, 80, "131072"));
    assert_eq!(step(&config(true, 80, "131072")), off);
    assert_eq!(step(&config(true, 40, "null")), off);
    // A window on layers 40..80 is not modelled: refused, naming the key.
    let path = config(true, 40, "4096");
    let r = run(&[
        "eval",
        "--hf-config",
        &path,
        "--nodes",
        "8",
        "--tp",
        "8",
        "--pp",
        "2",
    ]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("\"use_sliding_window\""), "{}", r.stderr);
}
