//! `--emit torchtitan` for mixture-of-experts models: the recipe builds the model as one of
//! torchtitan's MoE flavors (qwen3 "30B-A3B"/"235B-A22B", deepseek_v3 "671B") or registers a
//! Qwen3-shaped one with the model's own shape, and carries the plan's expert degree, dispatcher
//! and routing; what torchtitan cannot run as tpsim priced it is refused in one line, exit 2.

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

fn n(plan: &Value, key: &str) -> u64 {
    plan[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key}: {plan}"))
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

/// Balanced brackets, and `ast.parse` where python3 is installed.
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

const QWEN3_30B: [&str; 16] = [
    "--model",
    "qwen3-30b-a3b",
    "--nodes",
    "2",
    "--gpu",
    "h100-sxm-80g",
    "--framework",
    "torchtitan",
    "--global-batch",
    "128",
    "--zero",
    "3",
    "--micro-batch",
    "1",
    "--recompute",
    "full",
];

#[test]
fn qwen3_30b_a3b_plan_is_written_as_its_flavor_with_the_plans_expert_degree() {
    let mut flags = QWEN3_30B.to_vec();
    flags.extend(["--tp", "1", "--dp", "16", "--ep", "8"]);
    let (plan, r) = eval_both(&flags);
    let recipe = &r.stdout;
    assert_python(recipe);
    let s = settings(recipe);
    let g = |k| get(&s, k, recipe);
    assert_eq!(n(&plan, "ep"), 8);
    assert_eq!(g("expert_parallel_degree"), n(&plan, "ep").to_string());
    assert_eq!(g("data_parallel_shard_degree"), n(&plan, "dp").to_string());
    assert_eq!(g("tensor_parallel_degree"), "1");
    assert_eq!(flavor(recipe), "30B-A3B");
    assert_eq!(g("moe_comm_backend"), "\"standard\"");
    assert_eq!(g("moe_force_load_balance"), "False");
    assert_eq!(g("activation_checkpoint"), "FullAC.Config()");
    assert!(
        recipe.contains("from torchtitan.models.qwen3 import model_registry")
            && recipe.contains("from torchtitan.models.qwen3.config_registry import qwen3_30b_a3b")
            && recipe.contains("config = qwen3_30b_a3b()")
            && !recipe.contains("llama3"),
        "{recipe}"
    );
    // The bundled model's RoPE base is the flavor's: nothing written over it.
    assert!(!recipe.contains("theta="), "{recipe}");
    assert!(
        r.stderr.contains("torchtitan's qwen3 flavor 30B-A3B")
            && r.stderr.contains("auxiliary-loss-free"),
        "{}",
        r.stderr
    );
}

#[test]
fn plan_emit_torchtitan_picks_a_qwen3_30b_plan_it_can_write() {
    let r = run(&[
        "plan",
        "--model",
        "qwen3-30b-a3b",
        "--nodes",
        "1",
        "--gpu",
        "h100-sxm-80g",
        "--framework",
        "torchtitan",
        "--global-batch",
        "64",
        "--emit",
        "torchtitan",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let recipe = &r.stdout;
    assert_python(recipe);
    let s = settings(recipe);
    let degree = |k: &str| -> u32 { get(&s, k, recipe).parse().unwrap() };
    let (tp, ep) = (
        degree("tensor_parallel_degree"),
        degree("expert_parallel_degree"),
    );
    // torchtitan draws ep from dp_shard x cp x tp, and splits experts over TP at ep 1.
    let ranks = degree("data_parallel_shard_degree") * degree("context_parallel_degree") * tp;
    assert!(
        ranks.is_multiple_of(ep),
        "ep {ep} over {ranks} ranks:\n{recipe}"
    );
    assert!(ep > 1 || tp == 1, "ep {ep} tp {tp}:\n{recipe}");
    assert_eq!(flavor(recipe), "30B-A3B");
    // The header names the plan written, its expert degree included.
    let header = r
        .stderr
        .lines()
        .find(|l| l.starts_with("torchtitan configuration for "))
        .unwrap_or_else(|| panic!("{}", r.stderr));
    assert!(header.contains(&format!("ep {ep}")), "{header}\n{recipe}");
}

#[test]
fn deepseek_v3_with_deepep_and_round_robin_routing_is_the_671b_flavor() {
    let (plan, r) = eval_both(&[
        "--model",
        "deepseek-v3",
        "--nodes",
        "64",
        "--gpu",
        "h100-sxm-80g",
        "--framework",
        "torchtitan",
        "--tp",
        "1",
        "--dp",
        "512",
        "--ep",
        "64",
        "--zero",
        "3",
        "--micro-batch",
        "1",
        "--global-batch",
        "1024",
        "--recompute",
        "full",
        "--moe-dispatcher",
        "deepep",
        "--moe-routing",
        "round-robin",
    ]);
    let recipe = &r.stdout;
    assert_python(recipe);
    let s = settings(recipe);
    let g = |k| get(&s, k, recipe);
    assert_eq!(g("expert_parallel_degree"), n(&plan, "ep").to_string());
    assert_eq!(g("expert_parallel_degree"), "64");
    assert_eq!(flavor(recipe), "671B");
    assert_eq!(g("moe_comm_backend"), "\"deepep\"");
    assert_eq!(g("moe_force_load_balance"), "True");
    assert!(
        recipe.contains("from torchtitan.models.deepseek_v3 import model_registry")
            && recipe.contains("config = deepseek_v3_671b()"),
        "{recipe}"
    );
    assert!(r.stderr.contains("round-robin"), "{}", r.stderr);
}

#[test]
fn qwen3_235b_writes_the_models_rope_base_over_the_flavors() {
    let (_, r) = eval_both(&[
        "--model",
        "qwen3-235b-a22b",
        "--nodes",
        "16",
        "--gpu",
        "h100-sxm-80g",
        "--framework",
        "torchtitan",
        "--tp",
        "1",
        "--dp",
        "128",
        "--ep",
        "32",
        "--zero",
        "3",
        "--micro-batch",
        "1",
        "--global-batch",
        "256",
        "--recompute",
        "full",
    ]);
    let recipe = &r.stdout;
    assert_python(recipe);
    assert_eq!(flavor(recipe), "235B-A22B");
    // The flavor builds theta 5000000; Qwen3-235B-A22B's config.json says 1000000.
    let thetas: Vec<&str> = recipe
        .lines()
        .filter_map(|l| l.split_once("theta=").map(|(_, v)| v.trim()))
        .collect();
    assert_eq!(thetas, ["1000000.0"], "{recipe}");
    assert!(recipe.contains("import dataclasses"), "{recipe}");
    // No recipe ships for 235B-A22B: the data and optimizer come from 30B-A3B's.
    assert!(recipe.contains("config = qwen3_30b_a3b()"), "{recipe}");
    assert!(r.stderr.contains("ships no recipe"), "{}", r.stderr);
}

#[test]
fn a_qwen3_shaped_model_of_no_flavor_is_registered_with_its_own_shape() {
    let mut flags = QWEN3_30B.to_vec();
    flags.extend([
        "--layers",
        "24",
        "--num-experts",
        "64",
        "--tp",
        "1",
        "--dp",
        "16",
        "--ep",
        "16",
    ]);
    let (plan, r) = eval_both(&flags);
    let recipe = &r.stdout;
    assert_python(recipe);
    let s = settings(recipe);
    let g = |k| get(&s, k, recipe);
    assert_eq!(g("n_layers"), "24");
    assert_eq!(g("num_experts"), "64");
    assert_eq!(g("moe_hidden_dim"), "768");
    assert_eq!(g("top_k"), "8");
    assert_eq!(g("n_kv_heads"), "4");
    assert_eq!(g("head_dim"), "128");
    assert_eq!(g("vocab_size"), "151936");
    assert_eq!(g("enable_weight_tying"), "False");
    assert_eq!(g("expert_parallel_degree"), n(&plan, "ep").to_string());
    // Registered under the model's name, then built by qwen3's model_registry.
    let name = flavor(recipe);
    assert!(
        recipe.contains(&format!("qwen3.qwen3_configs[\"{name}\"] = _tpsim_flavor")),
        "{recipe}"
    );
    assert_ne!(name, "30B-A3B");
    // The RoPE table as long as the sequence trained.
    assert_eq!(g("max_context_length"), "4096");
    assert!(r.stderr.contains("no qwen3 flavor"), "{}", r.stderr);
}

#[test]
fn moe_plans_torchtitan_cannot_run_as_priced_are_refused_in_one_line() {
    let cases: [(&[&str], &[&str]); 5] = [
        // Mixtral's block has no q/k norms and no MLA: no torchtitan MoE module builds it.
        (
            &[
                "--model",
                "mixtral-8x7b",
                "--nodes",
                "4",
                "--tp",
                "1",
                "--dp",
                "32",
                "--ep",
                "8",
                "--zero",
                "3",
            ],
            &[
                "mixtral-8x7b has no query/key norms",
                "torchtitan/models/qwen3",
            ],
        ),
        // DeepSeek-V3's MTP is written (tests/emit_torchtitan_gpt_oss.rs) but torchtitan's
        // MTPDecoder refuses pipeline and context parallelism.
        (
            &[
                "--model",
                "deepseek-v3",
                "--mtp-layers",
                "1",
                "--nodes",
                "32",
                "--tp",
                "1",
                "--pp",
                "2",
                "--allow-uneven-pp",
                "--dp",
                "128",
                "--ep",
                "64",
                "--zero",
                "3",
            ],
            &["--mtp-layers 1 with --pp 2", "mtp.py"],
        ),
        // torchtitan's dispatchers drop no tokens.
        (
            &[
                "--model",
                "qwen3-30b-a3b",
                "--nodes",
                "2",
                "--tp",
                "1",
                "--dp",
                "16",
                "--ep",
                "8",
                "--zero",
                "3",
                "--moe-capacity-factor",
                "1.25",
            ],
            &["--moe-capacity-factor", "dropless"],
        ),
        // Longer than the flavor's RoPE table.
        (
            &[
                "--model",
                "qwen3-30b-a3b",
                "--seq-len",
                "65536",
                "--nodes",
                "2",
                "--tp",
                "1",
                "--cp",
                "8",
                "--dp",
                "2",
                "--ep",
                "16",
                "--zero",
                "3",
            ],
            &["--seq-len 65536", "40960", "RoPE"],
        ),
        // The grouped MXFP8 converter swaps in a padding dispatcher and raises on DeepEP.
        (
            &[
                "--model",
                "qwen3-30b-a3b",
                "--gpu",
                "b200-sxm-180g",
                "--nodes",
                "2",
                "--tp",
                "1",
                "--dp",
                "16",
                "--ep",
                "8",
                "--zero",
                "3",
                "--precision",
                "mxfp8",
                "--moe-dispatcher",
                "deepep",
            ],
            &[
                "--precision mxfp8 with --moe-dispatcher deepep",
                "swap_token_dispatcher",
            ],
        ),
    ];
    for (flags, needles) in cases {
        let mut args = vec!["eval"];
        args.extend(flags);
        args.extend([
            "--framework",
            "torchtitan",
            "--global-batch",
            "256",
            "--micro-batch",
            "1",
            "--recompute",
            "full",
            "--emit",
            "torchtitan",
        ]);
        assert_one_line_error(&run(&args), needles, &[], &format!("{flags:?}"));
    }
    // `plan` says a model no plan of which can be written before the search.
    assert_one_line_error(
        &run(&[
            "plan",
            "--model",
            "mixtral-8x7b",
            "--nodes",
            "4",
            "--framework",
            "torchtitan",
            "--global-batch",
            "256",
            "--emit",
            "torchtitan",
        ]),
        &["mixtral-8x7b has no query/key norms"],
        &[],
        "plan mixtral",
    );
}

/// With expert parallelism off torchtitan splits every routed expert over the TP ranks as it
/// splits a dense MLP (torchtitan/models/common/moe_sharding.py `expert_param_placement_dense`,
/// "EP disabled, TP > 1"): tpsim prices that plan at etp = tp and writes it with
/// expert_parallel_degree 1; whole experts on every TP rank (etp 1) are refused.
#[test]
fn at_ep_1_the_experts_are_split_over_tp_as_torchtitan_runs_them() {
    let flags = [
        "--model",
        "qwen3-30b-a3b",
        "--nodes",
        "2",
        "--framework",
        "torchtitan",
        "--tp",
        "2",
        "--dp",
        "8",
        "--zero",
        "3",
    ];
    let (plan, r) = eval_both(&flags);
    assert_eq!((n(&plan, "ep"), n(&plan, "etp")), (1, 2), "{plan}");
    let map = settings(&r.stdout);
    assert_eq!(get(&map, "expert_parallel_degree", &r.stdout), "1");
    assert_eq!(get(&map, "tensor_parallel_degree", &r.stdout), "2");
    let mut whole = vec!["eval"];
    whole.extend(flags);
    whole.extend(["--etp", "1"]);
    assert_one_line_error(
        &run(&whole),
        &[
            "--etp 1 with --tp 2",
            "expert_param_placement_dense",
            "use --etp 2",
        ],
        &[],
        "torchtitan ep 1 etp 1",
    );
}
