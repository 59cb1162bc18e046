//! Leftovers of round 22: torchtitan's eager GPT-OSS expert kernels priced, YAML's `.nan` as a
//! parameter count, a plan file's `sequence_parallel: yes`, and `--recompute-modules -core_attn`.

mod common;

use common::*;

/// `compute_s` of `eval` for `model` under torchtitan on 64 H100s (the brief's plan), compiled
/// or not.
fn torchtitan_compute_s(dir: &std::path::Path, model: &str, compile: &str) -> f64 {
    let r = run_in(
        dir,
        &[
            "eval",
            "--model",
            model,
            "--framework",
            "torchtitan",
            "--nodes",
            "8",
            "--tp",
            "1",
            "--dp",
            "64",
            "--ep",
            "8",
            "--zero",
            "3",
            "--recompute",
            "none",
            "--global-batch",
            "1536",
            "--torch-compile",
            compile,
            "--format",
            "json",
        ],
    );
    assert_eq!(r.code, 0, "{model}: {}", r.stderr);
    let out: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    out["plans"][0]["time"]["compute_s"]
        .as_f64()
        .expect("compute_s")
}

/// A number from a bundled cluster file's `key: value  # comment` line.
fn cluster_number(file: &str, key: &str) -> f64 {
    let text = std::fs::read_to_string(format!("{ROOT}/clusters/{file}")).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}:")))
        .and_then(|rest| rest.split('#').next()?.trim().parse().ok())
        .unwrap_or_else(|| panic!("{file} has {key}"))
}

/// torchtitan's `GptOssGroupedExperts` gathers and adds both expert biases and runs its clamped
/// SwiGLU as separate eager kernels (torchtitan/models/gpt_oss/moe.py at b5bcd76c66d0); tpsim
/// priced them under Megatron-Core only, so a GPT-OSS plan under `--framework torchtitan` cost
/// the same as one of an unclamped copy of the model. Now the eager kernels cost their bytes:
/// 22F + 4D elements forward and 47F + D backward per routed token copy beyond the one
/// activation kernel, at 2 bytes, F = D = 2880; and compiled (Inductor fuses them) nothing.
#[test]
fn torchtitan_prices_gpt_oss_experts_eager_kernels() {
    let dir = scratch("leftovers22", "gpt-oss");
    let spec = std::fs::read_to_string(format!("{ROOT}/models/gpt-oss-120b.yaml")).unwrap();
    let unclamped: String = spec
        .lines()
        .filter(|l| !l.trim_start().starts_with("glu_clamp_limit:"))
        .map(|l| {
            if l.starts_with("name:") {
                "name: gpt-oss-120b-unclamped".to_string()
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    assert_ne!(
        spec.trim_end(),
        unclamped,
        "the spec clamps its experts' GLU"
    );
    std::fs::write(dir.join("unclamped.yaml"), unclamped + "\n").unwrap();

    let eager = torchtitan_compute_s(&dir, "gpt-oss-120b", "false");
    let eager_plain = torchtitan_compute_s(&dir, "unclamped.yaml", "false");
    let added_s = eager - eager_plain;
    // 36 MoE layers x 24 micro-batches x 4096 tokens x top-4 copies, each (22 + 47) x 2880 +
    // (4 + 1) x 2880 elements of 2 bytes.
    let bytes = 36.0 * 24.0 * 4096.0 * 4.0 * (69.0 * 2880.0 + 5.0 * 2880.0) * 2.0;
    let achieved = cluster_number("h100-sxm-80g.yaml", "hbm_bandwidth_gb_per_s")
        * 1e9
        * cluster_number("h100-sxm-80g.yaml", "hbm_efficiency");
    // At the achieved bandwidth and the framework efficiency every kernel pays (the profile sets
    // none: `cluster::DEFAULT_FRAMEWORK_EFFICIENCY`, 0.90).
    let expected_s = bytes / achieved / 0.90;
    assert!(
        (added_s / expected_s - 1.0).abs() < 0.01,
        "eager GPT-OSS experts add {added_s} s; their bytes take {expected_s} s"
    );
    // Compiled, the clamp costs nothing more than the unclamped model's activation.
    let compiled = torchtitan_compute_s(&dir, "gpt-oss-120b", "true");
    let compiled_plain = torchtitan_compute_s(&dir, "unclamped.yaml", "true");
    assert!(
        (compiled - compiled_plain).abs() <= 1e-9 * compiled,
        "{compiled} vs {compiled_plain}"
    );
}

/// The bundled plan file that names its model by `params: 512B`.
fn seed_plan() -> String {
    std::fs::read_to_string(format!("{ROOT}/plans/seed-512b-32nodes.yaml")).unwrap()
}

/// `params: .nan` in a plan file (YAML's not-a-number, which a YAML reader hands over as text)
/// was "an unknown suffix"; it is not a finite number, as `nan` and `inf` are said.
#[test]
fn yaml_nan_params_is_not_a_finite_number() {
    let dir = scratch("leftovers22", "nan");
    for value in [".nan", ".NaN", ".inf", "-.inf", "nan", "inf"] {
        let plan = seed_plan().replace("\nparams: 512B\n", &format!("\nparams: {value}\n"));
        assert!(plan.contains(&format!("params: {value}")));
        std::fs::write(dir.join("p.yaml"), plan).unwrap();
        let r = run_in(&dir, &["eval", "--plan", "p.yaml"]);
        assert_one_line_error(
            &r,
            &[
                &format!("params: {value}"),
                "is not a finite number",
                "512B",
            ],
            &["suffix"],
            value,
        );
    }
}

/// `sequence_parallel: yes` (YAML 1.2 reads it as text) said "expected a boolean" with no fix.
#[test]
fn plan_file_yes_for_a_boolean_names_the_key_and_the_fix() {
    let dir = scratch("leftovers22", "yes");
    let plan = seed_plan().replace("sequence_parallel: true", "sequence_parallel: yes");
    assert!(plan.contains("sequence_parallel: yes"));
    std::fs::write(dir.join("p.yaml"), plan).unwrap();
    let r = run_in(&dir, &["eval", "--plan", "p.yaml"]);
    assert_one_line_error(
        &r,
        &[
            "plan.sequence_parallel: invalid type: string \"yes\", expected a boolean;",
            "takes true or false",
            "write sequence_parallel: true or sequence_parallel: false",
        ],
        &[],
        "sequence_parallel: yes",
    );
}

/// `--recompute-modules -core_attn` got clap's "unexpected argument '-c'": the names take no
/// dash, and the valid ones are listed as the flag's other errors list them.
#[test]
fn dashed_recompute_module_says_names_take_no_dash() {
    let base = [
        "eval",
        "--params",
        "7B",
        "--nodes",
        "1",
        "--recompute",
        "selective",
        "--recompute-modules",
    ];
    // The list the flag's own error gives.
    let mut args = base.to_vec();
    args.push("nonsense");
    let other = run(&args);
    let list = other
        .stderr
        .split_once("(choose from ")
        .and_then(|(_, rest)| rest.split_once(')'))
        .map(|(list, _)| list.to_string())
        .unwrap_or_else(|| panic!("a list in: {}", other.stderr));
    for (word, fix) in [
        ("-core_attn", "--recompute-modules core_attn"),
        ("--mlp", "--recompute-modules mlp"),
    ] {
        let mut args = base.to_vec();
        args.push(word);
        let r = run(&args);
        assert_one_line_error(
            &r,
            &[
                &format!("--recompute-modules {word}"),
                "take no dash",
                fix,
                &format!("(choose from {list})"),
            ],
            &["unexpected argument"],
            word,
        );
    }
    // A dashed word that is no module name is left to clap (a mistyped flag).
    let mut args = base.to_vec();
    args.extend(["mlp", "--tpp", "2"]);
    let r = run(&args);
    assert!(!r.stderr.contains("take no dash"), "{}", r.stderr);
}
