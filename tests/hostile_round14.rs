//! Hostile input, round 14: what probing every command and input channel again found. Every error
//! case checks exit 2, one line (so no panic or backtrace) and the words that name the value, the
//! rule and the fix.

mod common;

use common::*;

/// A GPT-OSS-shaped Megatron-LM launch line (128 experts, SwiGLU), all-to-all dispatch.
const GPT_OSS_LINE: &str = "--num-layers 36 --hidden-size 2880 --num-attention-heads 64 --group-query-attention --num-query-groups 8 --kv-channels 64 --ffn-hidden-size 2880 --num-experts 128 --moe-router-topk 4 --moe-ffn-hidden-size 2880 --moe-grouped-gemm --moe-token-dispatcher-type alltoall --swiglu --normalization RMSNorm --position-embedding-type rope --vocab-size 201088 --seq-length 4096 --max-position-embeddings 4096 --micro-batch-size 1 --global-batch-size 64 --expert-model-parallel-size 8 --bf16";

fn eval_line(line: &str) -> Run {
    run(&[
        "eval",
        "--nodes",
        "2",
        "--megatron-args",
        line,
        "--format",
        "json",
    ])
}

/// `--activation-func-clamp-value` (Megatron-Core's clamped GLU, GPT-OSS's `swiglu_limit`) was
/// skipped without a word: the model was evaluated without the clamp, which the bundled
/// GPT-OSS file and its Hugging Face config both set. It is now read as `moe.glu_clamp_limit`, and a
/// limit that is no positive number, or one with nothing gated to clamp, is refused.
#[test]
fn a_launch_lines_glu_clamp_is_read_or_refused() {
    let r = eval_line(&format!("{GPT_OSS_LINE} --activation-func-clamp-value 7.0"));
    assert_eq!(hf_model(&r)["moe"]["glu_clamp_limit"], 7.0, "{}", r.stderr);
    assert!(
        !r.stderr.contains("activation-func-clamp-value"),
        "read, so not listed as skipped: {}",
        r.stderr
    );
    let r = eval_line(GPT_OSS_LINE);
    assert!(
        hf_model(&r)["moe"].get("glu_clamp_limit").is_none(),
        "{}",
        r.stdout
    );
    for bad in ["nan", "inf", "-7", "0", "seven"] {
        let r = eval_line(&format!(
            "{GPT_OSS_LINE} --activation-func-clamp-value {bad}"
        ));
        assert_one_line_error(
            &r,
            &[
                &format!("--activation-func-clamp-value \"{bad}\""),
                "not a positive, finite number",
                "e.g. --activation-func-clamp-value 7.0",
            ],
            &[],
            &format!("clamp {bad}"),
        );
    }
    let ungated = GPT_OSS_LINE.replace(" --swiglu", "");
    let r = eval_line(&format!("{ungated} --activation-func-clamp-value 7"));
    assert_one_line_error(
        &r,
        &[
            "--activation-func-clamp-value 7 without --swiglu or --quick-geglu",
            "not gated",
            "add --swiglu or drop it",
        ],
        &[],
        "clamp without a gated MLP",
    );
    let dense = "--num-layers 4 --hidden-size 1024 --num-attention-heads 8 --ffn-hidden-size 4096 --swiglu --seq-length 1024 --max-position-embeddings 1024 --micro-batch-size 1 --global-batch-size 16 --bf16 --activation-func-clamp-value 7";
    let r = run(&["eval", "--nodes", "1", "--megatron-args", dense]);
    assert_one_line_error(
        &r,
        &[
            "--activation-func-clamp-value 7 without --num-experts",
            "mixture-of-experts layers only",
            "drop it for a dense model",
        ],
        &[],
        "clamp on a dense line",
    );
}

/// The bundled H100 profile with the line starting `key:` replaced by `key: value`.
fn h100_with(key: &str, value: &str) -> String {
    let text = std::fs::read_to_string(format!("{ROOT}/clusters/h100-sxm-80g.yaml")).unwrap();
    let at = text
        .find(&format!("\n{key}:"))
        .unwrap_or_else(|| panic!("the profile has {key}"))
        + 1;
    let end = at + text[at..].find('\n').unwrap();
    format!("{}{key}: {value}{}", &text[..at], &text[end..])
}

/// A GPU profile's optional numbers had no range beyond "positive": `peak_fp8_tflops: 1e-300` or
/// `sustained_matmul_fraction: 1e-300` priced a step of a 300-digit number of seconds and
/// "throughput: 0 tokens/s" (and `1e300` a free FP8 GEMM), where the required peaks and
/// efficiencies have bounds. They now meet the same bounds as their required kin.
#[test]
fn a_gpu_profiles_optional_peaks_and_shares_have_ranges() {
    let dir = scratch("round14", "gpu-ranges");
    for (key, value, range) in [
        (
            "peak_fp8_tflops",
            "1e-300",
            "outside 1e-6 to 100000 TFLOP/s",
        ),
        ("peak_fp8_tflops", "1e300", "outside 1e-6 to 100000 TFLOP/s"),
        ("fp8_gemm_efficiency", "1e-300", "outside 0.001 to 1"),
        ("fused_attention_efficiency", "1e-7", "outside 0.001 to 1"),
        ("fa2_attention_efficiency", "1e-9", "outside 0.001 to 1"),
        ("sustained_matmul_fraction", "1e-300", "outside 0.001 to 1"),
    ] {
        std::fs::write(dir.join("g.yaml"), h100_with(key, value)).unwrap();
        let r = run_in(
            &dir,
            &[
                "eval",
                "--model",
                "llama3-8b",
                "--gpu",
                "g.yaml",
                "--nodes",
                "1",
                "--tp",
                "1",
                "--pp",
                "1",
                "--precision",
                "fp8",
            ],
        );
        assert_one_line_error(
            &r,
            &[
                "g.yaml",
                &format!("{key}: {value} is {range}"),
                "rule:",
                "give a value in that range",
            ],
            &[],
            &format!("{key}: {value}"),
        );
    }
    // A B300's dense FP4 and the bundled profiles stay inside.
    std::fs::write(dir.join("g.yaml"), h100_with("peak_fp8_tflops", "14000")).unwrap();
    let r = run_in(
        &dir,
        &[
            "eval",
            "--model",
            "llama3-8b",
            "--gpu",
            "g.yaml",
            "--nodes",
            "1",
            "--tp",
            "1",
            "--pp",
            "1",
            "--precision",
            "fp8",
        ],
    );
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
}

/// A config whose `model_type` names another architecture than its `architectures` was read as
/// `model_type` says without a word: `"model_type": "llama"` over `["MixtralForCausalLM"]` was a
/// dense Llama, its eight experts dropped. It is now refused, naming both and the fix.
#[test]
fn an_hf_config_whose_model_type_and_architecture_disagree_is_refused() {
    let dir = scratch("round14", "hf-arch");
    let mixtral = std::fs::read_to_string(format!("{ROOT}/models/hf/mixtral-8x7b-v0.1.json"))
        .unwrap()
        .replace("\"model_type\": \"mixtral\"", "\"model_type\": \"llama\"");
    let r = eval_hf(&dir, "c.json", &mixtral);
    assert_one_line_error(
        &r,
        &[
            "\"model_type\": \"llama\"",
            "\"architectures\": [\"MixtralForCausalLM\"]",
            "MixtralForCausalLM is model_type \"mixtral\"",
            "correct one of them so they agree",
        ],
        &[],
        "llama over Mixtral",
    );
    // Names of one architecture still agree: Kimi K2 ships DeepseekV3ForCausalLM.
    let kimi = std::fs::read_to_string(format!("{ROOT}/models/hf/deepseek-v3.json"))
        .unwrap()
        .replace(
            "\"model_type\": \"deepseek_v3\"",
            "\"model_type\": \"kimi_k2\"",
        );
    let r = eval_hf(&dir, "k.json", &kimi);
    assert_eq!(hf_model(&r)["moe"]["experts"], 256, "{}", r.stderr);
}

/// A dense launch line for torch FSDP2 that Megatron-LM runs (no pipeline, untied, bf16).
const FSDP2_LINE: &str = "--num-layers 4 --hidden-size 1024 --num-attention-heads 8 --ffn-hidden-size 4096 --seq-length 1024 --max-position-embeddings 1024 --micro-batch-size 1 --global-batch-size 16 --untie-embeddings-and-output-weights --no-gradient-accumulation-fusion --use-torch-fsdp2";

/// `--use-torch-fsdp2` beside `--use-distributed-optimizer`, `--fp16` or expert parallelism was
/// priced as ZeRO-3, where Megatron-LM's `validate_args` refuses each; now refused as it does.
#[test]
fn torch_fsdp2_lines_megatron_refuses_are_refused() {
    let ok = run(&[
        "eval",
        "--nodes",
        "1",
        "--megatron-args",
        &format!("{FSDP2_LINE} --bf16"),
        "--format",
        "json",
    ]);
    assert!(ok.code == 0 || ok.code == 1, "{}", ok.stderr);
    let moe = "--num-experts 8 --moe-grouped-gemm --moe-token-dispatcher-type alltoall --expert-model-parallel-size 2";
    for (extra, needles) in [
        (
            "--bf16 --use-distributed-optimizer",
            [
                "--use-torch-fsdp2 with --use-distributed-optimizer",
                "Megatron-LM refuses torch FSDP2 with its own distributed optimizer",
                "drop --use-distributed-optimizer",
            ],
        ),
        (
            "--fp16",
            [
                "--use-torch-fsdp2 with --fp16",
                "does not support torch FSDP2 with fp16",
                "use --bf16",
            ],
        ),
        (
            &format!("--bf16 {moe}"),
            [
                "--use-torch-fsdp2 with --expert-model-parallel-size 2",
                "refuses torch FSDP2 with expert parallelism",
                "use --expert-model-parallel-size 1",
            ],
        ),
    ] {
        let r = run(&[
            "eval",
            "--nodes",
            "1",
            "--megatron-args",
            &format!("{FSDP2_LINE} {extra}"),
        ]);
        assert_one_line_error(&r, &needles, &[], extra);
    }
}

/// The bundled current-stack runs file cut down to its run `id`, each `(from, to)` replaced once.
fn modern_run(id: &str, edits: &[(&str, &str)]) -> String {
    let text = std::fs::read_to_string(format!("{ROOT}/validation/modern_runs.yaml")).unwrap();
    let runs_at = text.find("\nruns:\n").expect("a runs: key") + "\nruns:\n".len();
    let start = runs_at
        + text[runs_at..]
            .find(&format!("- id: {id}\n"))
            .unwrap_or_else(|| panic!("a run {id}"));
    let end = text[start + 2..]
        .find("\n- id:")
        .map_or(text.len(), |i| start + 2 + i + 1);
    let mut run = text[start..end].to_string();
    for (from, to) in edits {
        assert!(run.contains(from), "{id} has {from:?}");
        run = run.replacen(from, to, 1);
    }
    format!("{}{run}", &text[..runs_at])
}

const LLAMA_RUN: &str = "mbridge-25.11-pretrain-llama3_8b-gb300-8g-mxfp8-alt-gbs128";
const GPT_OSS_RUN: &str = "mbridge-25.11-pretrain-gpt_oss_120b-gb300-64g-bf16-gbs1280";

fn accuracy_of(name: &str, text: &str, extra: &[&str]) -> Run {
    let dir = scratch("round14", name);
    std::fs::write(dir.join("runs.yaml"), text).unwrap();
    let mut args = vec!["accuracy", "--runs", "runs.yaml"];
    args.extend_from_slice(extra);
    run_in(&dir, &args)
}

/// A current-stack run's `plan.recompute` that tpsim's reading does not recognise ("ful AC",
/// "bogus") was taken as unstated and left to the search, which priced another recompute than
/// the source's without a word (the published runs file refuses it). Now refused.
#[test]
fn a_current_stack_runs_unread_recompute_is_refused() {
    for value in ["ful AC", "bogus", "5"] {
        let text = modern_run(
            LLAMA_RUN,
            &[("    recompute: null", &format!("    recompute: {value}"))],
        );
        let r = accuracy_of("recompute", &text, &[]);
        assert_one_line_error(
            &r,
            &[
                "runs.yaml: run mbridge-25.11-pretrain-llama3_8b",
                &format!("plan.recompute: {}", tpsim_quote(value)),
                "is not a recompute tpsim reads",
                "null when the source does not say",
                "e.g. recompute: full AC",
            ],
            &[],
            value,
        );
    }
    for value in ["full AC", "selective AC", "none", "null"] {
        let text = modern_run(
            LLAMA_RUN,
            &[("    recompute: null", &format!("    recompute: {value}"))],
        );
        let r = accuracy_of("recompute-ok", &text, &[]);
        assert_eq!(r.code, 0, "{value}: {}", r.stderr);
    }
}

/// How tpsim quotes a value with a space (in double quotes) or without (bare).
fn tpsim_quote(value: &str) -> String {
    if value.contains(' ') {
        format!("{value:?}")
    } else {
        value.to_string()
    }
}

/// A current-stack run's `model.head_dim` was never read: a dense run was built with hidden /
/// heads whatever the file said (head_dim: 64 for Llama 3 8B priced as 128), and an MoE run's
/// could contradict its bundled model. A dense run now takes it; an MoE run's must be the
/// bundled model's.
#[test]
fn a_current_stack_runs_head_dim_is_read_or_refused() {
    let planned_head_dim = |text: &str| {
        let r = accuracy_of("head-dim", text, &["--run", LLAMA_RUN, "--format", "json"]);
        assert_eq!(r.code, 0, "{}", r.stderr);
        let json: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
        json["planned"]["model"]["head_dim"].clone()
    };
    let plain = modern_run(LLAMA_RUN, &[]);
    assert_eq!(planned_head_dim(&plain), 128);
    let narrow = modern_run(LLAMA_RUN, &[("    head_dim: null", "    head_dim: 64")]);
    assert_eq!(planned_head_dim(&narrow), 64);
    let text = modern_run(GPT_OSS_RUN, &[("    head_dim: 64", "    head_dim: 128")]);
    let r = accuracy_of("head-dim-moe", &text, &[]);
    assert_one_line_error(
        &r,
        &[
            "model.head_dim: 128 is not the 64 of the bundled gpt-oss-120b",
            "models/gpt-oss-120b.yaml",
            "e.g. head_dim: 64, or null",
        ],
        &[],
        "MoE head_dim",
    );
}

/// The bundled 512B plan with `from` (a whole line) replaced by `to`, evaluated with `extra`.
fn eval_plan_with(name: &str, from: &str, to: &str, extra: &[&str]) -> Run {
    let dir = scratch("round14", name);
    std::fs::write(dir.join("p.yaml"), bundled_plan_with(from, to)).unwrap();
    let mut args = vec!["eval", "--plan", "p.yaml"];
    args.extend_from_slice(extra);
    run_in(&dir, &args)
}

/// A plan file's `reshard_after_forward: false` under ZeRO-1 was refused with the flags'
/// message, "--reshard-after-forward needs --zero 3 ...; use --zero 3 or drop
/// --reshard-after-forward", naming a flag the user never typed and no file; and the same for a
/// file's `optimizer_states: bf16` under its Megatron-Core framework. Both are now said in the
/// file's keys, with the file named and an edit of it as the fix.
#[test]
fn plan_file_reshard_and_optimizer_states_errors_name_the_files_keys() {
    let r = eval_plan_with(
        "reshard",
        "  reshard_after_forward: true",
        "  reshard_after_forward: false",
        &[],
    );
    assert_one_line_error(
        &r,
        &[
            "p.yaml: reshard_after_forward: false needs zero: 3",
            "the file has zero: 1",
            "set zero: 3, or delete the reshard_after_forward line",
        ],
        &["--reshard-after-forward", "--zero"],
        "reshard in the file",
    );
    let r = eval_plan_with(
        "reshard-zero",
        "  reshard_after_forward: true",
        "  reshard_after_forward: false",
        &["--zero", "2"],
    );
    assert_one_line_error(
        &r,
        &[
            "--zero 2 with p.yaml's reshard_after_forward: false",
            "give --zero 3, or delete the file's reshard_after_forward line",
        ],
        &["--reshard-after-forward"],
        "--zero over the file's reshard",
    );
    let r = eval_plan_with(
        "reshard-ok",
        "  reshard_after_forward: true",
        "  reshard_after_forward: false",
        &["--zero", "3", "--format", "json"],
    );
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    let r = eval_plan_with(
        "states",
        "optimizer_states: fp32",
        "optimizer_states: bf16",
        &[],
    );
    assert_one_line_error(
        &r,
        &[
            "p.yaml: optimizer_states: bf16 is not how framework: megatron-core stores its optimizer",
            "FSDP2 formats",
            "set framework: torchtitan or optimizer_states: fp32",
        ],
        &["--optimizer-states", "--framework"],
        "optimizer states in the file",
    );
    // A file that sets no framework runs as the default one, and the message says so rather
    // than quoting a `framework:` line the file does not have.
    let dir = scratch("round14", "states-no-framework");
    let plan = bundled_plan_with("optimizer_states: fp32", "optimizer_states: bf16")
        .replace("framework: megatron-core\n", "");
    assert!(
        !plan.contains("\nframework:"),
        "the test file still sets a framework"
    );
    std::fs::write(dir.join("p.yaml"), plan).unwrap();
    let r = run_in(&dir, &["eval", "--plan", "p.yaml"]);
    assert_one_line_error(
        &r,
        &[
            "p.yaml: optimizer_states: bf16 is not how framework: megatron-core (the default; the file sets no framework) stores its optimizer",
            "set framework: torchtitan or optimizer_states: fp32",
        ],
        &["--optimizer-states", "--framework"],
        "optimizer states in a file without a framework",
    );
}

/// A current-stack run's `model.moe` was read into a JSON value, where YAML's `.inf` and `.nan`
/// became null: `moe: .inf` priced the run as dense and `experts: .nan` was taken as not given,
/// both without a word. Now refused at their line.
#[test]
fn a_non_finite_number_in_a_runs_moe_is_refused() {
    for (name, text, shown) in [
        (
            "moe-inf",
            modern_run(LLAMA_RUN, &[("    moe: null", "    moe: .inf")]),
            "inf",
        ),
        (
            "experts-nan",
            modern_run(
                GPT_OSS_RUN,
                &[("      experts: 128", "      experts: .nan")],
            ),
            "NaN",
        ),
    ] {
        let r = accuracy_of(name, &text, &[]);
        assert_one_line_error(
            &r,
            &[
                "runs.yaml:",
                &format!("moe holds {shown}, which is not a finite number"),
                "a dense run has moe: null",
                "or moe: null",
            ],
            &[],
            name,
        );
    }
}

/// A current-stack run's `plan.fsdp` was read as any value and only `true` counted: `fsdp: yes`,
/// `fsdp: "true"` or `fsdp: 1` planned the run without FSDP, without a word. It is a boolean now.
#[test]
fn a_runs_fsdp_that_is_no_boolean_is_refused() {
    for value in ["yes", "\"true\"", "1"] {
        let text = modern_run(
            LLAMA_RUN,
            &[("    fsdp: false", &format!("    fsdp: {value}"))],
        );
        let r = accuracy_of("fsdp", &text, &[]);
        assert_one_line_error(
            &r,
            &[
                "runs.yaml:",
                "plan.fsdp: invalid type",
                "expected a boolean",
            ],
            &[],
            value,
        );
    }
    let text = modern_run(LLAMA_RUN, &[("    fsdp: false", "    fsdp: null")]);
    assert_eq!(accuracy_of("fsdp-null", &text, &[]).code, 0);
}

/// A spec's `name` was taken whatever it was: `name: ""` printed "1 node x 8  = 8 GPUs" and a
/// name with a NUL or an escape sequence went to the terminal and the reports as it was. Empty,
/// blank and control-character names are now refused, for GPU profiles, model files and a plan
/// file's inline model.
#[test]
fn an_empty_or_control_character_spec_name_is_refused() {
    let dir = scratch("round14", "names");
    for (value, words) in [
        ("\"\"", "name: \"\" is empty"),
        ("\"   \"", "name: \"   \" is blank"),
        ("\"h100\\u0000x\"", "holds a control character"),
        ("\"h100\\e[31mred\"", "holds a control character"),
    ] {
        std::fs::write(dir.join("g.yaml"), h100_with("name", value)).unwrap();
        let r = run_in(
            &dir,
            &[
                "eval",
                "--model",
                "llama3-8b",
                "--gpu",
                "g.yaml",
                "--nodes",
                "1",
                "--tp",
                "8",
                "--pp",
                "1",
            ],
        );
        assert_one_line_error(
            &r,
            &[
                "g.yaml: ",
                words,
                "rule: the name is shown",
                "e.g. name: my-gpu",
            ],
            &[],
            value,
        );
    }
    let model = std::fs::read_to_string(format!("{ROOT}/models/llama3-8b.yaml"))
        .unwrap()
        .replacen("name: llama3-8b", "name: \"\"", 1);
    std::fs::write(dir.join("m.yaml"), model).unwrap();
    let r = run_in(
        &dir,
        &[
            "eval", "--model", "m.yaml", "--nodes", "1", "--tp", "8", "--pp", "1",
        ],
    );
    assert_one_line_error(
        &r,
        &["m.yaml: name: \"\" is empty", "e.g. name: my-model"],
        &[],
        "model file",
    );
    let r = eval_plan_with("inline-name", "  name: derived-512.0b", "  name: \"\"", &[]);
    assert_one_line_error(
        &r,
        &[
            "p.yaml: model.name: \"\" is empty",
            "e.g. model.name: my-model",
        ],
        &[],
        "inline model",
    );
    // A name with spaces or other visible characters is a name.
    std::fs::write(dir.join("g.yaml"), h100_with("name", "my h100 (custom)")).unwrap();
    let r = run_in(
        &dir,
        &[
            "eval",
            "--model",
            "llama3-8b",
            "--gpu",
            "g.yaml",
            "--nodes",
            "1",
            "--tp",
            "8",
            "--pp",
            "1",
        ],
    );
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
}

/// A YAML tag in a spec was dropped without a word: `peak_bf16_tflops: !!str 989` (text, as
/// YAML says) was read as the number 989, and `description: !important note` as "note". A
/// tagged value is now refused at its line, with the untagged value to write.
#[test]
fn a_yaml_tag_in_a_spec_is_refused() {
    let dir = scratch("round14", "tags");
    for (key, value, tag, write) in [
        (
            "peak_bf16_tflops",
            "!!str 989",
            "!!str",
            "write peak_bf16_tflops: 989",
        ),
        (
            "description",
            "!important note",
            "!important",
            "write description: note",
        ),
    ] {
        std::fs::write(dir.join("g.yaml"), h100_with(key, value)).unwrap();
        let r = run_in(
            &dir,
            &[
                "eval",
                "--model",
                "llama3-8b",
                "--gpu",
                "g.yaml",
                "--nodes",
                "1",
                "--tp",
                "8",
                "--pp",
                "1",
            ],
        );
        assert_one_line_error(
            &r,
            &[
                "g.yaml:",
                &format!("{key}: {value} carries the YAML tag {tag}"),
                "tpsim does not read",
                write,
            ],
            &[],
            value,
        );
    }
    let text = bundled_plan_with("  tp: 8", "  tp: !!int 8");
    std::fs::write(dir.join("p.yaml"), text).unwrap();
    let r = run_in(&dir, &["eval", "--plan", "p.yaml"]);
    assert_one_line_error(
        &r,
        &[
            "p.yaml:",
            "plan.tp: !!int 8 carries the YAML tag !!int",
            "write tp: 8",
        ],
        &[],
        "plan file",
    );
}
