//! Hostile input and new-user reading, round 21: partial rotary and the context-parallel exchange
//! in every command, saved plans under `--emit`, and absurd numbers in model files and GPU
//! profiles. Every error case checks exit 2, one line on stderr and the words that name the value,
//! the rule and the fix.

mod common;

use common::*;

/// A Llama-8B-shaped launch line on one node with tp 4, without the switches a case adds.
const LINE: &str = "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --ffn-hidden-size 14336 --swiglu --seq-length 4096 --vocab-size 128256 --micro-batch-size 1 --global-batch-size 64 --disable-bias-linear --normalization RMSNorm --position-embedding-type rope --untie-embeddings-and-output-weights --bf16 --tensor-model-parallel-size 4 --hidden-dropout 0 --attention-dropout 0";

fn launch(extra: &str) -> Run {
    run(&[
        "eval",
        "--nodes",
        "1",
        "--megatron-args",
        &format!("{LINE} {extra}"),
    ])
}

/// The bundled Llama 3 8B model file with `extra` lines appended, written as `dir/name`.
fn llama_file_with(dir: &std::path::Path, name: &str, extra: &str) {
    let text = std::fs::read_to_string(format!("{ROOT}/models/llama3-8b.yaml")).unwrap();
    std::fs::write(dir.join(name), format!("{text}{extra}\n")).unwrap();
}

/// A bundled GPU profile with its `key:` line's value replaced by `value`, written as
/// `dir/gpu.yaml`.
fn profile_with(dir: &std::path::Path, key: &str, value: &str) {
    let text = std::fs::read_to_string(format!("{ROOT}/clusters/h100-sxm-80g.yaml")).unwrap();
    let out: Vec<String> = text
        .lines()
        .map(|l| match l.strip_prefix(&format!("{key}:")) {
            Some(rest) => {
                let comment = rest.find('#').map_or("", |at| &rest[at..]);
                format!("{key}: {value}   {comment}")
            }
            None => l.to_string(),
        })
        .collect();
    std::fs::write(dir.join("gpu.yaml"), out.join("\n")).unwrap();
}

fn eval_on_profile(dir: &std::path::Path) -> Run {
    run_in(
        dir,
        &[
            "eval",
            "--model",
            "llama3-8b",
            "--gpu",
            "gpu.yaml",
            "--nodes",
            "1",
            "--tp",
            "8",
            "--global-batch",
            "64",
        ],
    )
}

/// A rotated share too small to turn one pair of a head's dimensions (`rotary_percent: 1e-300`,
/// `--rotary-percent 1e-300`, `partial_rotary_factor: 0.001` on 128-wide heads) was accepted,
/// priced as a partial rotary and printed as "rotary positions on 0.0000…0001% of each head" (300
/// digits), and `--emit megatron` wrote `--rotary-percent 0.000…`; Megatron-Core and transformers
/// rotate `int(share x head width)` dimensions, so nothing. It is refused now, with the least
/// share that rotates a pair, and a share past 1 is echoed as written, not in 309 digits.
#[test]
fn a_rotary_share_that_turns_no_pair_is_refused() {
    let dir = scratch("round21", "rotary-share");
    llama_file_with(&dir, "tiny.yaml", "rotary_percent: 1e-300");
    let r = run_in(
        &dir,
        &[
            "eval",
            "--model",
            "tiny.yaml",
            "--nodes",
            "1",
            "--tp",
            "8",
            "--global-batch",
            "64",
        ],
    );
    assert_one_line_error(
        &r,
        &[
            "rotary_percent 1e-300",
            "rotates 0 of the 128 dimensions",
            "give at least 0.015625",
        ],
        &["000000000"],
        "model file, tiny share",
    );
    llama_file_with(&dir, "huge.yaml", "rotary_percent: 1e308");
    let r = run_in(
        &dir,
        &[
            "eval",
            "--model",
            "huge.yaml",
            "--nodes",
            "1",
            "--tp",
            "8",
            "--global-batch",
            "64",
        ],
    );
    assert_one_line_error(
        &r,
        &["rotary_percent 1e308", "(0, 1]"],
        &["000000000"],
        "model file, huge share",
    );
    // The least share that turns a pair is read.
    llama_file_with(&dir, "pair.yaml", "rotary_percent: 0.015625");
    let r = run_in(
        &dir,
        &[
            "eval",
            "--model",
            "pair.yaml",
            "--nodes",
            "1",
            "--tp",
            "8",
            "--global-batch",
            "64",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("rotary positions on 1.6% of each head"));

    let r = launch("--rotary-percent 1e-300");
    assert_one_line_error(
        &r,
        &[
            "--rotary-percent 1e-300",
            "rotates 0 of the 128 dimensions",
            "int(rotary_percent x kv_channels)",
            "--rotary-percent 0.015625",
        ],
        &["000000000"],
        "launch line",
    );
    // The head width is --kv-channels where the line gives it: 0.01 of 256 is 2 dimensions.
    let r = launch("--rotary-percent 0.01 --kv-channels 256");
    assert_eq!(r.code, 0, "{}", r.stderr);

    let config =
        format!(r#"{{"model_type": "llama", {HF_SHAPE}, "partial_rotary_factor": 0.001}}"#);
    let r = eval_hf(&dir, "config.json", &config);
    assert_one_line_error(
        &r,
        &[
            "key \"partial_rotary_factor\" is 0.001",
            "rotates 0 of the 128 dimensions",
            "give at least 0.015625",
        ],
        &[],
        "HF config",
    );
}

/// A GPU profile's `fp8_gemm_efficiency: 1e308` (and the other optional shares, and the low
/// precision peaks) was echoed as a 309-digit number; `gpus_per_node: 1e-300` as 300 zeros (cut
/// with "…"). The values now read back as they were written.
#[test]
fn absurd_profile_numbers_are_echoed_as_written() {
    let dir = scratch("round21", "profile-numbers");
    for key in [
        "fp8_gemm_efficiency",
        "fused_attention_efficiency",
        "fa2_attention_efficiency",
        "sustained_matmul_fraction",
    ] {
        profile_with(&dir, key, "1e308");
        assert_one_line_error(
            &eval_on_profile(&dir),
            &[&format!("{key}: 1e308"), "fraction in (0, 1]", "e.g. 0.75"],
            &["000000000"],
            key,
        );
    }
    profile_with(&dir, "peak_fp8_tflops", "-1e300");
    assert_one_line_error(
        &eval_on_profile(&dir),
        &["peak_fp8_tflops: -1e300", "positive number"],
        &["000000000"],
        "peak_fp8_tflops",
    );
    profile_with(&dir, "gpus_per_node", "1e-300");
    assert_one_line_error(
        &eval_on_profile(&dir),
        &["gpus_per_node", "`1e-300`", "write gpus_per_node: 1"],
        &["000000000", "…"],
        "gpus_per_node",
    );
}

/// A model file's `published_params_b: 1e-300` beside `published_active_params_b` was echoed as
/// 300 zeros (and `published_active_params_b: 1e308` as 309 digits).
#[test]
fn absurd_published_sizes_are_echoed_as_written() {
    let dir = scratch("round21", "published");
    let text = std::fs::read_to_string(format!("{ROOT}/models/gpt-oss-20b.yaml")).unwrap();
    for (from, to, words) in [
        (
            "published_params_b: 20.91",
            "published_params_b: 1e-300",
            "published_params_b 1e-300",
        ),
        (
            "published_active_params_b: 3.61",
            "published_active_params_b: 1e308",
            "published_active_params_b 1e308",
        ),
    ] {
        assert!(text.contains(from), "{from}");
        std::fs::write(dir.join("m.yaml"), text.replacen(from, to, 1)).unwrap();
        let r = run_in(
            &dir,
            &[
                "eval",
                "--model",
                "m.yaml",
                "--nodes",
                "1",
                "--global-batch",
                "64",
                "--ep",
                "8",
            ],
        );
        assert_one_line_error(
            &r,
            &[words, "is more than", "check both"],
            &["000000000"],
            to,
        );
    }
}

/// `eval --plan FILE --emit deepspeed`, the file saved under megatron-core (or torchtitan), was
/// evaluated as DeepSpeed runs it without a word about the file (the note said "--emit deepspeed
/// plans as --framework deepspeed runs it"): the JSON's plan had another step time than `eval
/// --plan FILE` printed, and a torchtitan file was refused for "--optimizer-states fp32-params",
/// a flag the user never gave. The file keeps its framework now, and the emit refuses it as every
/// other `--emit` refuses a plan of another framework.
#[test]
fn a_saved_plan_keeps_its_framework_under_emit_deepspeed() {
    let dir = scratch("round21", "emit-deepspeed");
    for framework in ["megatron-core", "torchtitan"] {
        let r = run_in(
            &dir,
            &[
                "plan",
                "--model",
                "llama3-8b",
                "--nodes",
                "2",
                "--global-batch",
                "64",
                "--pp",
                "2",
                "--vpp",
                "1",
                "--top",
                "1",
                "--framework",
                framework,
                "--save",
                "p.yaml",
            ],
        );
        assert_eq!(r.code, 0, "{}", r.stderr);
        let r = run_in(&dir, &["eval", "--plan", "p.yaml", "--emit", "deepspeed"]);
        assert_one_line_error(
            &r,
            &[
                "--emit deepspeed",
                &format!("evaluated as {framework} runs it (framework: {framework} in p.yaml)"),
                "use --framework deepspeed",
            ],
            &["--optimizer-states", "plans as --framework deepspeed"],
            framework,
        );
    }
    // Asked for, the file is evaluated as DeepSpeed runs it.
    let r = run_in(
        &dir,
        &[
            "eval",
            "--plan",
            "p.yaml",
            "--emit",
            "deepspeed",
            "--framework",
            "deepspeed",
            "--optimizer-states",
            "fp32",
            // torchtitan's replicated plan keeps fp32 gradients, reduced during the backward,
            // which DeepSpeed runs at ZeRO-0 with neither (emit_round50).
            "--grad-dtype",
            "bf16",
            "--overlap-grad-reduce",
            "false",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains("\"train_batch_size\": 64"),
        "{}",
        r.stdout
    );
    // Without a plan file, --emit deepspeed still plans as DeepSpeed runs it.
    let r = run(&[
        "eval",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--tp",
        "8",
        "--global-batch",
        "64",
        "--emit",
        "deepspeed",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stderr.contains("plans as --framework deepspeed"));
}

/// `plan --model gpt-oss-20b --seq-len 131072` searched no context parallelism (every CP
/// candidate was an "invalid_plan": Transformer Engine's K/V ring, Megatron-Core's default,
/// refuses sliding windows) and said nothing of it, though `--cp-exchange kv-all-gather` runs
/// them. A note now says so and names the flag.
#[test]
fn plan_says_why_a_windowed_model_gets_no_context_parallelism() {
    let args = [
        "plan",
        "--model",
        "gpt-oss-20b",
        "--nodes",
        "1",
        "--global-batch",
        "8",
        "--seq-len",
        "131072",
        "--top",
        "1",
    ];
    let r = run(&args);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout
            .contains("note: the search tried no context parallelism")
            && r.stdout.contains("kv-ring exchange")
            && r.stdout
                .contains("--cp-exchange kv-all-gather or head-all-to-all"),
        "{}",
        r.stdout
    );
    // With an exchange that runs windows, CP is searched and there is no note.
    let with: Vec<&str> = args
        .iter()
        .copied()
        .chain(["--cp-exchange", "kv-all-gather"])
        .collect();
    let r = run(&with);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!r.stdout.contains("tried no context parallelism"));
    // Nor for a model without a window.
    let r = run(&[
        "plan",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--global-batch",
        "64",
        "--top",
        "1",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!r.stdout.contains("tried no context parallelism"));
}

/// `plan --save -` (and `--report -`, `sweep --chart -`, `calibrate --output -`), the usual
/// spelling of standard output, wrote a file (or created a directory) named `-` in the working
/// directory, said "saved the best plan to -" and printed nothing more. It is refused now, before
/// any work, with a name to give.
#[test]
fn a_dash_for_an_output_is_refused() {
    let dir = scratch("round21", "dash");
    let base = [
        "plan",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--global-batch",
        "64",
        "--top",
        "1",
    ];
    for (flag, what, example) in [
        ("--save", "a file", "--save plans/"),
        ("--report", "a directory", "--report reports/"),
    ] {
        let args: Vec<&str> = base.iter().copied().chain([flag, "-"]).collect();
        let r = run_in(&dir, &args);
        assert_one_line_error(
            &r,
            &[
                &format!("{flag} -:"),
                &format!("writes {what} here, not standard output"),
                example,
            ],
            &[],
            flag,
        );
    }
    let r = run_in(
        &dir,
        &[
            "sweep",
            "--model",
            "llama3-8b",
            "--global-batch",
            "64",
            "--axis",
            "nodes",
            "--values",
            "1,2",
            "--chart",
            "-",
        ],
    );
    assert_one_line_error(
        &r,
        &["--chart -:", "not standard output", "--chart sweep.svg"],
        &[],
        "--chart",
    );
    assert!(
        !dir.join("-").exists(),
        "a file or directory named - was written"
    );
}

/// A plan file whose `cp_exchange:` its `framework:` does not run (`head-all-to-all` under
/// torchtitan, `torch-all-gather` under megatron-core) was refused as "--cp-exchange
/// head-all-to-all ... which --framework torchtitan does not run; ... drop --cp-exchange": flags
/// the user never gave. The error now names the file's two keys and the fix in them.
#[test]
fn a_plan_files_exchange_and_framework_are_said_in_its_keys() {
    let dir = scratch("round21", "file-exchange");
    let r = run_in(
        &dir,
        &[
            "plan",
            "--model",
            "llama3-8b",
            "--nodes",
            "1",
            "--global-batch",
            "8",
            "--seq-len",
            "65536",
            "--cp-exchange",
            "head-all-to-all",
            "--top",
            "1",
            "--save",
            "a2a.yaml",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let saved = std::fs::read_to_string(dir.join("a2a.yaml")).unwrap();
    assert!(
        saved.contains("\ncp_exchange: head-all-to-all\n"),
        "{saved}"
    );
    assert!(saved.contains("\nframework: megatron-core\n"), "{saved}");
    for (from, to, words) in [
        (
            "framework: megatron-core",
            "framework: torchtitan",
            [
                "t.yaml: cp_exchange: head-all-to-all runs under framework: megatron-core",
                "the file says framework: torchtitan",
                "set cp_exchange: torch-all-gather",
            ],
        ),
        (
            "cp_exchange: head-all-to-all",
            "cp_exchange: torch-all-gather",
            [
                "t.yaml: cp_exchange: torch-all-gather runs under framework: torchtitan",
                "the file says framework: megatron-core",
                "set cp_exchange: kv-ring",
            ],
        ),
    ] {
        std::fs::write(dir.join("t.yaml"), saved.replacen(from, to, 1)).unwrap();
        let r = run_in(&dir, &["eval", "--plan", "t.yaml"]);
        assert_one_line_error(&r, &words, &["--cp-exchange", "--framework"], to);
    }
    // A flag over the file still decides.
    let r = run_in(
        &dir,
        &["eval", "--plan", "t.yaml", "--cp-exchange", "kv-ring"],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
}

/// `accuracy --runs` on a file of one run said "1 runs: mean |error| ...", and `--emit
/// megatron-bridge` on one node "run on 1 nodes x 8 GPUs".
#[test]
fn one_run_and_one_node_are_said_in_the_singular() {
    let dir = scratch("round21", "singular");
    let text = std::fs::read_to_string(format!("{ROOT}/validation/published_runs.yaml")).unwrap();
    let first = text.find("\n- id:").expect("a run");
    let second = text[first + 6..].find("\n- id:").expect("a second run") + first + 6;
    std::fs::write(dir.join("one.yaml"), &text[..second + 1]).unwrap();
    let r = run_in(&dir, &["accuracy", "--runs", "one.yaml"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("\n1 run: mean |error|"), "{}", r.stdout);
    let r = run(&[
        "eval",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--tp",
        "8",
        "--global-batch",
        "64",
        "--emit",
        "megatron-bridge",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stderr.contains("run on 1 node x 8 GPUs"), "{}", r.stderr);
}
