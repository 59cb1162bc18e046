//! `--emit torchtitan` for GPT-OSS (torchtitan/models/gpt_oss at b5bcd76c66d0: flavors "20b" and
//! "120b", varlen attention with windows and sinks, biased clamped experts) and for DeepSeek-V3's
//! multi-token prediction (`model_registry(..., num_mtp_layers=N)` with `MTPLoss`): the recipe
//! builds the flavor with the plan's degrees, says what tpsim's price leaves out of what
//! torchtitan runs, and refuses in one line, exit 2, what torchtitan's module does not run.

mod common;

use common::*;
use serde_json::Value;
use std::collections::BTreeMap;

/// `eval` of one plan as JSON and as a recipe, with the same flags.
fn eval_both(flags: &[&str]) -> (Value, Run) {
    let mut args = vec!["eval"];
    args.extend(flags);
    let mut as_json = args.clone();
    as_json.extend(["--format", "json"]);
    let plan = json(&as_json)["plans"][0].clone();
    args.extend(["--emit", "torchtitan"]);
    let r = run(&args);
    assert_eq!(r.code, 0, "{flags:?}: {}", r.stderr);
    (plan, r)
}

/// `name=value` and `config.x.name = value` lines of the recipe, by name (the last part).
fn settings(recipe: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for line in recipe.lines().map(str::trim) {
        if line.starts_with('#') {
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let key = key.trim().rsplit('.').next().unwrap_or_default();
        let value = value.trim().trim_end_matches(',');
        if !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            out.insert(key.to_string(), value.to_string());
        }
    }
    out
}

fn get<'a>(map: &'a BTreeMap<String, String>, key: &str, recipe: &str) -> &'a str {
    map.get(key)
        .unwrap_or_else(|| panic!("no {key} in:\n{recipe}"))
        .as_str()
}

fn n(plan: &Value, key: &str) -> String {
    plan[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key}: {plan}"))
        .to_string()
}

/// The flavor `model_registry(` is called with (its first argument, on the next line).
fn flavor(recipe: &str) -> String {
    let mut lines = recipe.lines().map(str::trim);
    lines
        .find(|l| l.ends_with("model_registry("))
        .unwrap_or_else(|| panic!("no model_registry( call in:\n{recipe}"));
    lines
        .next()
        .unwrap()
        .trim_end_matches(',')
        .trim_matches('"')
        .to_string()
}

/// Balanced brackets, four-space indents, and `ast.parse` where python3 is installed.
fn assert_python(recipe: &str) {
    let mut depth: i64 = 0;
    for c in recipe.chars() {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth -= 1,
            _ => {}
        }
        assert!(depth >= 0, "unbalanced brackets:\n{recipe}");
    }
    assert_eq!(depth, 0, "unbalanced brackets:\n{recipe}");
    for line in recipe.lines() {
        let indent = line.len() - line.trim_start().len();
        assert_eq!(indent % 4, 0, "indent {indent}: {line}");
    }
    let python = std::process::Command::new("python3")
        .args(["-c", "import ast,sys; ast.parse(sys.stdin.read())"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let Ok(mut child) = python else {
        return;
    };
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(recipe.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "python3 ast.parse refuses the recipe: {}\n{recipe}",
        String::from_utf8_lossy(&out.stderr)
    );
}

const TORCHTITAN: [&str; 10] = [
    "--framework",
    "torchtitan",
    "--zero",
    "3",
    "--micro-batch",
    "1",
    "--global-batch",
    "256",
    "--recompute",
    "full",
];

/// torchtitan's flags, then `extra`.
fn with<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut flags = TORCHTITAN.to_vec();
    flags.extend(extra);
    flags
}

#[test]
fn gpt_oss_models_are_written_as_torchtitans_gpt_oss_flavors_with_the_plans_degrees() {
    // (bundled model, nodes, tp, dp, ep, flavor, its recipe)
    let cases = [
        ("gpt-oss-20b", "1", "2", "4", "4", "20b", "gpt_oss_20b"),
        ("gpt-oss-120b", "8", "1", "64", "8", "120b", "gpt_oss_120b"),
    ];
    for (model, nodes, tp, dp, ep, want_flavor, recipe_fn) in cases {
        let flags = with(&[
            "--model", model, "--nodes", nodes, "--tp", tp, "--dp", dp, "--ep", ep,
        ]);
        let (plan, r) = eval_both(&flags);
        let recipe = &r.stdout;
        assert_python(recipe);
        assert_eq!(flavor(recipe), want_flavor, "{model}:\n{recipe}");
        assert!(
            recipe.contains("from torchtitan.models.gpt_oss import model_registry")
                && recipe.contains(&format!(
                    "from torchtitan.models.gpt_oss.config_registry import {recipe_fn}"
                ))
                && recipe.contains(&format!("config = {recipe_fn}()")),
            "{model}:\n{recipe}"
        );
        let s = settings(recipe);
        let g = |k| get(&s, k, recipe);
        // The windows and sinks run in varlen attention, said rather than left to the default.
        assert_eq!(g("attn_backend"), "\"varlen\"", "{recipe}");
        assert_eq!(g("tensor_parallel_degree"), n(&plan, "tp"));
        assert_eq!(g("data_parallel_shard_degree"), n(&plan, "dp"));
        assert_eq!(g("expert_parallel_degree"), n(&plan, "ep"));
        assert_eq!(g("expert_parallel_degree"), ep);
        assert_eq!(g("context_parallel_degree"), "1");
        // The flavor's RoPE base is the model's: no override.
        assert!(!recipe.contains("dataclasses.replace"), "{recipe}");
        // What tpsim's price leaves out, named beside the recipe; not the Flex note of the
        // other models.
        for needle in [
            "gpt_oss flavor",
            "varlen_attn",
            "window_size (127, 0)",
            "sigmoid(lse - sink)",
        ] {
            assert!(
                r.stderr.contains(needle),
                "{model}: no {needle:?} in:\n{}",
                r.stderr
            );
        }
        // The experts' eager bias adds and clamped SwiGLU are priced (eager is torchtitan's
        // default), so no note lists them as left out.
        assert!(
            !r.stderr.contains("GptOssGroupedExperts"),
            "{model}: {}",
            r.stderr
        );
        assert!(
            !r.stderr.contains("default attn_backend \"flex\""),
            "{model}: {}",
            r.stderr
        );
    }
}

#[test]
fn gpt_oss_from_its_hugging_face_config_is_the_20b_flavor() {
    let flags = with(&[
        "--hf-config",
        "models/hf/gpt-oss-20b.json",
        "--nodes",
        "1",
        "--tp",
        "1",
        "--dp",
        "8",
        "--ep",
        "8",
    ]);
    let (_, r) = eval_both(&flags);
    assert_eq!(flavor(&r.stdout), "20b", "{}", r.stdout);
}

#[test]
fn gpt_oss_pipeline_lists_its_stages_and_mxfp8_converts_attention_and_experts() {
    let flags = with(&[
        "--model",
        "gpt-oss-120b",
        "--nodes",
        "16",
        "--tp",
        "1",
        "--pp",
        "2",
        "--dp",
        "64",
        "--ep",
        "8",
    ]);
    let (plan, r) = eval_both(&flags);
    let recipe = &r.stdout;
    assert_python(recipe);
    let s = settings(recipe);
    assert_eq!(get(&s, "pipeline_parallel_degree", recipe), n(&plan, "pp"));
    // 36 layers over two stages, the embedding first and the norm and output layer last.
    assert!(
        recipe.contains("[\"tok_embeddings\", *_layers(0, 18)]")
            && recipe.contains("[*_layers(18, 36), \"norm\", \"lm_head\"]"),
        "{recipe}"
    );

    // MXFP8 on Blackwell at tp 1: the attention's linears (gpt_oss has no shared experts or
    // dense feed-forwards) and the grouped experts.
    let flags = with(&[
        "--model",
        "gpt-oss-20b",
        "--gpu",
        "b200-sxm-180g",
        "--nodes",
        "1",
        "--tp",
        "1",
        "--dp",
        "8",
        "--ep",
        "8",
        "--precision",
        "mxfp8",
    ]);
    let (_, r) = eval_both(&flags);
    let recipe = &r.stdout;
    assert_python(recipe);
    assert!(
        recipe.contains("fqns=[\"attention\"],")
            && recipe.contains("MXFP8GroupedExpertsConverter.Config(")
            && !recipe.contains("shared_experts"),
        "{recipe}"
    );
}

#[test]
fn gpt_oss_plans_and_shapes_torchtitan_does_not_run_are_refused_in_one_line() {
    let cases: [(&[&str], &[&str]); 5] = [
        // mx.py swaps the ScaledBiasRowwiseLinear output projection for a plain MXFP8Linear.
        (
            &[
                "--model",
                "gpt-oss-20b",
                "--gpu",
                "b200-sxm-180g",
                "--nodes",
                "1",
                "--tp",
                "2",
                "--dp",
                "4",
                "--ep",
                "4",
                "--precision",
                "mxfp8",
            ],
            &[
                "--precision mxfp8 with --tp 2",
                "ScaledBiasRowwiseLinear",
                "mx.py",
            ],
        ),
        // No gpt_oss flavor has 8 layers.
        (
            &[
                "--model",
                "gpt-oss-120b",
                "--layers",
                "8",
                "--nodes",
                "1",
                "--tp",
                "1",
                "--dp",
                "8",
                "--ep",
                "8",
            ],
            &["8 layers", "no gpt_oss flavor", "20b", "120b"],
        ),
        // torchtitan windows every even layer with 128 tokens, no other.
        (
            &[
                "--model",
                "gpt-oss-120b",
                "--attention-window",
                "256",
                "--nodes",
                "8",
                "--tp",
                "1",
                "--dp",
                "64",
                "--ep",
                "8",
            ],
            &["256 tokens", "torchtitan/models/gpt_oss"],
        ),
        // gpt_oss has no MTP (deepseek_v3's MTPDecoder only).
        (
            &[
                "--model",
                "gpt-oss-20b",
                "--mtp-layers",
                "1",
                "--nodes",
                "1",
                "--tp",
                "1",
                "--dp",
                "8",
                "--ep",
                "8",
            ],
            &["--mtp-layers 1", "torchtitan/models/gpt_oss"],
        ),
        // Past the flavors' RoPE table (max_context_length 131072).
        (
            &[
                "--model",
                "gpt-oss-20b",
                "--seq-len",
                "262144",
                "--nodes",
                "1",
                "--tp",
                "1",
                "--dp",
                "8",
                "--ep",
                "8",
            ],
            &["--seq-len 262144", "131072", "gpt_oss flavor 20b"],
        ),
    ];
    for (flags, needles) in cases {
        let mut args = vec!["eval"];
        args.extend(TORCHTITAN);
        args.extend(flags);
        args.extend(["--emit", "torchtitan"]);
        assert_one_line_error(
            &run(&args),
            needles,
            &["not written for torchtitan"],
            &format!("{flags:?}"),
        );
    }
}

#[test]
fn deepseek_v3_mtp_is_written_with_torchtitans_mtp_loss() {
    let flags = with(&[
        "--model",
        "deepseek-v3",
        "--mtp-layers",
        "1",
        "--nodes",
        "32",
        "--tp",
        "1",
        "--dp",
        "256",
        "--ep",
        "64",
    ]);
    let (_, r) = eval_both(&flags);
    let recipe = &r.stdout;
    assert_python(recipe);
    assert_eq!(flavor(recipe), "671B");
    let s = settings(recipe);
    assert_eq!(get(&s, "num_mtp_layers", recipe), "1");
    assert!(
        recipe.contains("from torchtitan.models.deepseek_v3.mtp import MTPLoss")
            && recipe.contains("config.loss = MTPLoss.Config(")
            && !recipe.contains("CrossEntropyLoss"),
        "{recipe}"
    );
    // Without MTP, no MTP argument and the plain loss.
    let flags = with(&[
        "--model",
        "deepseek-v3",
        "--nodes",
        "32",
        "--tp",
        "1",
        "--dp",
        "256",
        "--ep",
        "64",
    ]);
    let (_, r) = eval_both(&flags);
    assert!(
        !r.stdout.contains("num_mtp_layers") && r.stdout.contains("CrossEntropyLoss.Config("),
        "{}",
        r.stdout
    );
    // Qwen3's module has no MTP.
    let mut args = vec!["eval"];
    args.extend(TORCHTITAN);
    args.extend([
        "--model",
        "qwen3-30b-a3b",
        "--mtp-layers",
        "1",
        "--nodes",
        "2",
        "--tp",
        "1",
        "--dp",
        "16",
        "--ep",
        "8",
        "--emit",
        "torchtitan",
    ]);
    assert_one_line_error(
        &run(&args),
        &["--mtp-layers 1", "deepseek_v3 model only"],
        &[],
        "qwen3 mtp",
    );
}
