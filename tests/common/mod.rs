//! What the input-handling regression tests (tests/input_*.rs) share: running the built
//! binary, scratch directories, the one-line-error check, and Hugging Face configs evaluated on
//! one node. Each test crate uses part of it.
#![allow(dead_code)]

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

pub const ROOT: &str = env!("CARGO_MANIFEST_DIR");

pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

pub fn run_in(dir: &Path, args: &[&str]) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_tpsim"))
        .current_dir(dir)
        .args(args)
        .stdin(Stdio::null())
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("tpsim runs");
    Run {
        code: out.status.code().expect("tpsim exits"),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

pub fn run(args: &[&str]) -> Run {
    run_in(Path::new(ROOT), args)
}

/// The JSON a command prints (exit 0, or 1 when nothing fits).
pub fn json(args: &[&str]) -> Value {
    let r = run(args);
    assert!(r.code == 0 || r.code == 1, "{args:?}: {}", r.stderr);
    serde_json::from_str(&r.stdout)
        .unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {}\n{}", r.stdout, r.stderr))
}

/// A fresh scratch directory for one test (`suite` keeps test crates apart).
pub fn scratch(suite: &str, name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tpsim-{suite}-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Exit 2 with exactly one `error:` line on stderr, which contains every one of `needles` and
/// none of `absent`.
pub fn assert_one_line_error(r: &Run, needles: &[&str], absent: &[&str], what: &str) {
    assert_eq!(
        r.code, 2,
        "{what}: want exit 2, got {}\nstdout: {}\nstderr: {}",
        r.code, r.stdout, r.stderr
    );
    let lines: Vec<&str> = r.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{what}: want one line, got:\n{}", r.stderr);
    assert!(lines[0].starts_with("error: "), "{what}: {}", lines[0]);
    for needle in needles {
        assert!(
            lines[0].contains(needle),
            "{what}: no {needle:?} in: {}",
            lines[0]
        );
    }
    for word in absent {
        assert!(
            !lines[0].contains(word),
            "{what}: {word:?} in: {}",
            lines[0]
        );
    }
}

/// A dense shape for Hugging Face configs: 32 layers, hidden 4096, 32 heads.
pub const HF_SHAPE: &str = r#""hidden_size": 4096, "num_attention_heads": 32, "num_hidden_layers": 32, "intermediate_size": 14336, "vocab_size": 32000, "max_position_embeddings": 4096"#;

/// Writes `config` (JSON text) as `dir/name` and evaluates it on one node (tp 8, pp 1).
pub fn eval_hf(dir: &Path, name: &str, config: &str) -> Run {
    std::fs::write(dir.join(name), config).unwrap();
    let mut args = vec![
        "eval",
        "--hf-config",
        name,
        "--nodes",
        "1",
        "--tp",
        "8",
        "--pp",
        "1",
        "--global-batch",
        "64",
        "--format",
        "json",
    ];
    // GPT-OSS's experts have biases, which Megatron-Core splits over no expert-TP ranks
    // (TransformerConfig asserts ETP 1); the expert TP would otherwise follow --tp 8.
    if config.contains("gpt_oss") {
        args.extend(["--etp", "1"]);
    }
    run_in(dir, &args)
}

/// The `model` object of an `eval --format json` run.
pub fn hf_model(r: &Run) -> Value {
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    serde_json::from_str::<Value>(&r.stdout).unwrap()["model"].clone()
}

/// The bundled 512B plan with its first line matching `from` (a whole line) replaced by `to`.
pub fn bundled_plan_with(from: &str, to: &str) -> String {
    let plan = std::fs::read_to_string(format!("{ROOT}/plans/best-512b-32nodes.yaml")).unwrap();
    let at = plan
        .find(&format!("\n{from}\n"))
        .unwrap_or_else(|| panic!("the plan has the line {from:?}"))
        + 1;
    format!("{}{to}{}", &plan[..at], &plan[at + from.len()..])
}

/// A four-layer Nemotron-H MoE config (`ME*E`, the Nano's widths) with `extra` JSON members
/// appended (each starting with a comma, e.g. `, "moe_latent_size": 1024`).
pub fn nemotron_h_moe_config(extra: &str) -> String {
    format!(
        r#"{{
  "architectures": ["NemotronHForCausalLM"],
  "model_type": "nemotron_h",
  "vocab_size": 131072,
  "hidden_size": 2688,
  "intermediate_size": 1856,
  "num_hidden_layers": 4,
  "hybrid_override_pattern": "ME*E",
  "num_attention_heads": 32,
  "head_dim": 128,
  "num_key_value_heads": 2,
  "mamba_num_heads": 64,
  "n_groups": 8,
  "mamba_head_dim": 64,
  "n_routed_experts": 128,
  "n_shared_experts": 1,
  "moe_intermediate_size": 1856,
  "moe_shared_expert_intermediate_size": 3712,
  "num_experts_per_tok": 6{extra}
}}"#
    )
}

/// Nemotron 3 Super on the cluster and batch of Megatron-Bridge's 64-GPU H100 layout
/// (recipes/nemotronh/h100/nemotron_3_super.py: 8 nodes of 8 H100, 1,280 sequences of 4,096
/// tokens) at tp 1 and etp 1, as `eval` flags; the tests add the pipeline, experts and the rest.
pub const SUPER_H100_RUN: [&str; 14] = [
    "--model",
    "nemotron-3-super-120b-a12b",
    "--gpu",
    "h100-sxm-80g",
    "--nodes",
    "8",
    "--global-batch",
    "1280",
    "--seq-len",
    "4096",
    "--tp",
    "1",
    "--etp",
    "1",
];

/// Megatron-Bridge's 26.x plan for Nemotron 3 Super on 64 GB300 GPUs (tp 1, ep 64, micro-batch 1,
/// no recompute, ZeRO-1, MXFP8), as `eval` flags.
pub const SUPER_GB300_PLAN: [&str; 24] = [
    "--gpu",
    "gb300-nvl72",
    "--nodes",
    "16",
    "--gpus-per-node",
    "4",
    "--global-batch",
    "512",
    "--precision",
    "mxfp8",
    "--tp",
    "1",
    "--pp",
    "1",
    "--ep",
    "64",
    "--etp",
    "1",
    "--micro-batch",
    "1",
    "--recompute",
    "none",
    "--zero",
    "1",
];

/// `eval --format json` of `model` at [`SUPER_GB300_PLAN`], with `extra` flags.
pub fn super_gb300_eval(model: &str, extra: &[&str]) -> Value {
    let mut args = vec!["eval", "--model", model];
    args.extend(extra);
    args.extend(SUPER_GB300_PLAN);
    args.extend(["--format", "json"]);
    json(&args)
}

/// The records of a CSV text as RFC 4180 reads them (Python's `csv` module, a spreadsheet):
/// cells split on commas outside quotes, a quoted cell's doubled quotes read as one, and line
/// breaks inside quotes kept. A test that split lines on commas would pass on a writer that
/// changes the text to stay free of commas.
pub fn csv_records(text: &str) -> Vec<Vec<String>> {
    let mut records = Vec::new();
    let mut record = Vec::new();
    let mut cell = String::new();
    let mut quoted = false;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                chars.next();
                cell.push('"');
            }
            (true, '"') => quoted = false,
            (true, c) => cell.push(c),
            (false, '"') if cell.is_empty() => quoted = true,
            (false, ',') => record.push(std::mem::take(&mut cell)),
            (false, '\r') if chars.peek() == Some(&'\n') => {}
            (false, '\n') => {
                record.push(std::mem::take(&mut cell));
                records.push(std::mem::take(&mut record));
            }
            (false, c) => cell.push(c),
        }
    }
    assert!(!quoted, "an unclosed quote in: {text}");
    if !cell.is_empty() || !record.is_empty() {
        record.push(cell);
        records.push(record);
    }
    records
}

/// One CSV line's cells as RFC 4180 reads them ([`csv_records`]).
pub fn csv_cells(line: &str) -> Vec<String> {
    csv_records(line).into_iter().next().unwrap_or_default()
}

/// The legend of an SVG figure as (name, colour) pairs: a `■` mark's fill and the name beside it,
/// drawn as one text element ("■ optimizer") or as the mark and then the name.
pub fn legend_colours(svg: &str) -> Vec<(String, String)> {
    let texts: Vec<(String, String)> = svg
        .split("<text ")
        .skip(1)
        .filter_map(|t| {
            let fill = t.split("fill=\"").nth(1)?.split('"').next()?.to_string();
            let body = t
                .split_once('>')?
                .1
                .split("</text>")
                .next()?
                .trim()
                .to_string();
            Some((fill, body))
        })
        .collect();
    let mut out = Vec::new();
    for (i, (fill, body)) in texts.iter().enumerate() {
        if body == "■" {
            if let Some((_, name)) = texts.get(i + 1) {
                out.push((name.clone(), fill.clone()));
            }
        } else if let Some(name) = body.strip_prefix("■ ") {
            out.push((name.to_string(), fill.clone()));
        }
    }
    out
}

/// The shape flags an `--hf-config` refusal offers: the words after "this config's values: ", up
/// to ", then" and any note in brackets.
pub fn offered_flags(message: &str) -> Vec<String> {
    message
        .split("this config's values: ")
        .nth(1)
        .unwrap_or_else(|| panic!("no flags with the config's values in: {message}"))
        .split(", then")
        .next()
        .unwrap()
        .split(" (")
        .next()
        .unwrap()
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// Average ranks (ties share their mean rank).
pub fn ranks(v: &[f64]) -> Vec<f64> {
    let mut idx: Vec<usize> = (0..v.len()).collect();
    idx.sort_by(|&a, &b| v[a].total_cmp(&v[b]));
    let mut r = vec![0.0; v.len()];
    let mut i = 0;
    while i < idx.len() {
        let mut j = i;
        while j + 1 < idx.len() && v[idx[j + 1]] == v[idx[i]] {
            j += 1;
        }
        for &k in &idx[i..=j] {
            r[k] = (i + j) as f64 / 2.0;
        }
        i = j + 1;
    }
    r
}

/// Spearman's rank correlation of two equally long samples (Pearson's on their average ranks).
pub fn spearman(a: &[f64], b: &[f64]) -> f64 {
    let (ra, rb) = (ranks(a), ranks(b));
    let n = ra.len() as f64;
    let (ma, mb) = (ra.iter().sum::<f64>() / n, rb.iter().sum::<f64>() / n);
    let cov: f64 = ra.iter().zip(&rb).map(|(x, y)| (x - ma) * (y - mb)).sum();
    let va: f64 = ra.iter().map(|x| (x - ma).powi(2)).sum();
    let vb: f64 = rb.iter().map(|y| (y - mb).powi(2)).sum();
    cov / (va * vb).sqrt()
}

/// The median of a sample (the mean of the middle two when it has an even count).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// An out-of-sample row's error (predicted / published − 1) against the error recorded for it:
/// prints the row's line and returns the error, with a failure line when it moved more than
/// `margin` from the recorded one.
pub fn against_recorded(
    id: &str,
    published: f64,
    predicted: f64,
    recorded: f64,
    margin: f64,
) -> (f64, Option<String>) {
    let error = predicted / published - 1.0;
    eprintln!(
        "{id:<42} published {published:>7.1} predicted {predicted:>7.1} {:+6.1}% (recorded {:+.1}%)",
        100.0 * error,
        100.0 * recorded
    );
    let failure = ((error - recorded).abs() > margin).then(|| {
        format!(
            "{id}: {:+.1}% vs recorded {:+.1}%",
            100.0 * error,
            100.0 * recorded
        )
    });
    (error, failure)
}
