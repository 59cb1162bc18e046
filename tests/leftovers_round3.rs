//! Review leftovers, round 3: a launch line that lost GPT-OSS's clamp limit, a torch FSDP2 line
//! Megatron-LM refuses, a routing flag with no effect said nowhere, and three model-input
//! messages (a divide-by-zero step, a window note in flag words, published sizes that disagree).

mod common;

use common::*;
use serde_json::Value;

/// `plan --model NAME --nodes 8 --emit megatron`: the launch line (stdout) and the notes.
fn emit_megatron(model: &str, dir: &std::path::Path) -> Run {
    let r = run_in(
        dir,
        &[
            "plan", "--model", model, "--nodes", "8", "--emit", "megatron",
        ],
    );
    assert!(r.code == 0, "{model}: {}", r.stderr);
    r
}

/// The `model` of `eval --megatron-args LINE --nodes 8 --format json`.
fn model_of_line(line: &str) -> Value {
    let r = run(&[
        "eval",
        "--megatron-args",
        line,
        "--nodes",
        "8",
        "--format",
        "json",
    ]);
    hf_model(&r)
}

/// The `model` of `eval --model NAME` on the plan the launch line carries.
fn model_of(model: &str, dir: &std::path::Path) -> Value {
    let r = run_in(
        dir,
        &[
            "eval", "--model", model, "--nodes", "8", "--tp", "1", "--pp", "1", "--format", "json",
        ],
    );
    hf_model(&r)
}

/// GPT-OSS's clamped GLU was stored as `clamped_glu: true` with no limit, so `--emit megatron`
/// wrote no `--activation-func-clamp-value` and the line, pasted back, described a model without
/// the clamp. The limit is now kept (`moe.glu_clamp_limit`), written, and read back as given; the
/// GPT-OSS details tpsim does not model are named in a note.
#[test]
fn gpt_oss_clamp_limit_survives_the_launch_line() {
    let dir = scratch("leftovers3", "clamp");
    let r = emit_megatron("gpt-oss-120b", &dir);
    let line = r.stdout.trim();
    assert!(
        line.contains("--swiglu --activation-func-clamp-value 7.0 "),
        "{line}"
    );
    for detail in [
        "--glu-linear-offset 1.0",
        "--quick-geglu",
        "--softmax-type learnable",
        "--position-embedding-type yarn",
    ] {
        assert!(
            r.stderr.contains(detail),
            "note names {detail}: {}",
            r.stderr
        );
    }
    let back = model_of_line(line);
    let bundled = model_of("gpt-oss-120b", &dir);
    assert_eq!(back["moe"], bundled["moe"], "{line}");
    assert_eq!(back["moe"]["glu_clamp_limit"], 7.0);
    assert_eq!(back["params"], bundled["params"]);
    // Another limit goes out and back as written.
    let text = std::fs::read_to_string(format!("{ROOT}/models/gpt-oss-20b.yaml")).unwrap();
    std::fs::write(
        dir.join("m.yaml"),
        text.replace("glu_clamp_limit: 7.0 ", "glu_clamp_limit: 6.5 "),
    )
    .unwrap();
    let r = emit_megatron("m.yaml", &dir);
    assert!(
        r.stdout.contains("--activation-func-clamp-value 6.5 "),
        "{}",
        r.stdout
    );
    assert_eq!(
        model_of_line(r.stdout.trim())["moe"]["glu_clamp_limit"],
        6.5
    );
    // The same line pasted as eval's own flags (as the shell splits `$(...)`) keeps the limit.
    let mut pasted = vec!["eval", "--nodes", "8", "--format", "json"];
    pasted.extend(r.stdout.split_whitespace());
    assert_eq!(
        hf_model(&run_in(&dir, &pasted))["moe"]["glu_clamp_limit"],
        6.5
    );
    // A dense model's line carries no clamp and no GPT-OSS note.
    let r = emit_megatron("llama3-8b", &dir);
    assert!(!r.stdout.contains("clamp"), "{}", r.stdout);
    assert!(!r.stderr.contains("GPT-OSS"), "{}", r.stderr);
}

/// A model file of the old form (`clamped_glu: true`, no limit) is refused at its line with the
/// key to write instead; a limit that is no positive number is refused too.
#[test]
fn an_old_clamped_glu_key_is_refused_with_its_replacement() {
    let text = std::fs::read_to_string(format!("{ROOT}/models/gpt-oss-20b.yaml")).unwrap();
    let dir = scratch("leftovers3", "old-clamp");
    for (to, needles) in [
        (
            "clamped_glu: true     ",
            &[
                "m.yaml:",
                "clamped_glu",
                "glu_clamp_limit: 7.0",
                "swiglu_limit",
            ][..],
        ),
        (
            "glu_clamp_limit: -7.0 ",
            &[
                "m.yaml:",
                "glu_clamp_limit: -7",
                "positive, finite",
                "e.g. glu_clamp_limit: 7.0",
            ][..],
        ),
    ] {
        std::fs::write(
            dir.join("m.yaml"),
            text.replace("glu_clamp_limit: 7.0 ", to),
        )
        .unwrap();
        let r = run_in(&dir, &["plan", "--model", "m.yaml", "--nodes", "1"]);
        assert_one_line_error(&r, needles, &[], to);
    }
}

/// The Hugging Face reader takes GPT-OSS's `swiglu_limit` (7.0 when absent, GptOssConfig's
/// default); `null` is refused, since transformers' GptOssExperts clamps without a condition.
#[test]
fn an_hf_gpt_oss_swiglu_limit_is_read() {
    let text = std::fs::read_to_string(format!("{ROOT}/models/hf/gpt-oss-20b.json")).unwrap();
    let with = |limit: &str| text.replacen('{', &format!("{{\"swiglu_limit\": {limit}, "), 1);
    let dir = scratch("leftovers3", "hf-limit");
    let r = eval_hf(&dir, "c.json", &with("5.5"));
    assert_eq!(hf_model(&r)["moe"]["glu_clamp_limit"], 5.5, "{}", r.stderr);
    let r = eval_hf(&dir, "c.json", &text);
    assert_eq!(hf_model(&r)["moe"]["glu_clamp_limit"], 7.0, "{}", r.stderr);
    let r = eval_hf(&dir, "c.json", &with("null"));
    assert_one_line_error(
        &r,
        &[
            "c.json",
            "\"swiglu_limit\" is null",
            "\"swiglu_limit\": 7.0",
        ],
        &[],
        "null swiglu_limit",
    );
    let r = eval_hf(&dir, "c.json", &with("0"));
    assert_one_line_error(
        &r,
        &["\"swiglu_limit\" is 0", "positive, finite"],
        &[],
        "zero swiglu_limit",
    );
}

/// A bare `--use-torch-fsdp2` line was priced as ZeRO-3, though Megatron-LM's `validate_args`
/// asserts `--no-gradient-accumulation-fusion` and `--untie-embeddings-and-output-weights` with
/// it (and sets neither). Each missing flag is now refused by name.
#[test]
fn a_torch_fsdp2_line_without_its_companions_is_refused() {
    const BASE: &str = "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096 --global-batch-size 512 --tensor-model-parallel-size 2 --bf16 --use-torch-fsdp2";
    for (extra, missing) in [
        (
            " --untie-embeddings-and-output-weights",
            "--no-gradient-accumulation-fusion",
        ),
        (
            " --no-gradient-accumulation-fusion",
            "--untie-embeddings-and-output-weights",
        ),
    ] {
        let r = run(&[
            "eval",
            "--nodes",
            "4",
            "--megatron-args",
            &format!("{BASE}{extra}"),
        ]);
        assert_one_line_error(
            &r,
            &[
                &format!("--use-torch-fsdp2 without {missing}"),
                "arguments.py",
                &format!("add {missing}"),
            ],
            &[],
            missing,
        );
    }
    let line =
        format!("{BASE} --no-gradient-accumulation-fusion --untie-embeddings-and-output-weights");
    let r = run(&[
        "eval",
        "--nodes",
        "4",
        "--megatron-args",
        &line,
        "--format",
        "json",
    ]);
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    let json: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(json["plans"][0]["zero"], 3, "{}", r.stderr);
}

/// The same rules for Megatron-LM's flags pasted on `eval` (`--use-torch-fsdp2` without
/// `--megatron-args`), where the model says whether its embeddings are tied.
#[test]
fn pasted_torch_fsdp2_flags_follow_the_same_rules() {
    let eval = |model: &str, nodes: &str, tp: &str, extra: &[&str]| {
        let mut args = vec![
            "eval",
            "--model",
            model,
            "--nodes",
            nodes,
            "--tp",
            tp,
            "--pp",
            "1",
            "--global-batch",
            "512",
            "--use-torch-fsdp2",
            "--format",
            "json",
        ];
        args.extend_from_slice(extra);
        run(&args)
    };
    let r = eval("llama3-8b", "4", "2", &[]);
    assert_one_line_error(
        &r,
        &[
            "--use-torch-fsdp2 without --no-gradient-accumulation-fusion",
            "add --no-gradient-accumulation-fusion",
        ],
        &[],
        "pasted fsdp2 with fusion",
    );
    let r = eval(
        "gpt3-175b",
        "16",
        "8",
        &["--no-gradient-accumulation-fusion"],
    );
    assert_one_line_error(
        &r,
        &["gpt3-175b", "tied", "--untie-embeddings-and-output-weights"],
        &[],
        "pasted fsdp2 on a tied model",
    );
    let r = eval(
        "llama3-8b",
        "4",
        "2",
        &["--no-gradient-accumulation-fusion"],
    );
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    let json: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(json["plans"][0]["zero"], 3, "{}", r.stderr);
}

/// `--moe-routing round-robin` with the all-to-all dispatcher gave the numbers of random routing
/// and said nothing: the routing only changes what DeepEP sends. It is now said on stderr.
#[test]
fn routing_that_changes_nothing_is_said() {
    let eval = |extra: &[&str]| {
        let mut args = vec![
            "eval",
            "--model",
            "qwen3-30b-a3b",
            "--nodes",
            "2",
            "--tp",
            "1",
            "--pp",
            "1",
            "--ep",
            "8",
            "--global-batch",
            "256",
            "--format",
            "json",
        ];
        args.extend_from_slice(extra);
        let r = run(&args);
        assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
        r
    };
    let random = eval(&[]);
    let round_robin = eval(&["--moe-routing", "round-robin"]);
    let plans = |r: &Run| serde_json::from_str::<Value>(&r.stdout).unwrap()["plans"].clone();
    assert_eq!(plans(&random), plans(&round_robin));
    assert!(
        round_robin
            .stderr
            .contains("--moe-routing round-robin changes only what DeepEP")
            && round_robin.stderr.contains("--moe-dispatcher deepep"),
        "{}",
        round_robin.stderr
    );
    assert!(!random.stderr.contains("DeepEP"), "{}", random.stderr);
    // With DeepEP the routing is priced, and no note says otherwise.
    let deepep = eval(&["--moe-routing", "round-robin", "--moe-dispatcher", "deepep"]);
    assert!(!deepep.stderr.contains("changes only"), "{}", deepep.stderr);
}

/// A model file's `full_every: 1` note named `--window-attn-skip-freq 1`, a flag the user never
/// gave; it now names the file and its key.
#[test]
fn a_model_files_window_note_names_its_key() {
    let text = std::fs::read_to_string(format!("{ROOT}/models/gpt-oss-20b.yaml")).unwrap();
    let dir = scratch("leftovers3", "window");
    std::fs::write(
        dir.join("m.yaml"),
        text.replace("full_every: 2 ", "full_every: 1 "),
    )
    .unwrap();
    let r = run_in(&dir, &["plan", "--model", "m.yaml", "--nodes", "1"]);
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    let note = r
        .stderr
        .lines()
        .find(|l| l.contains("keeps full attention on every layer"))
        .unwrap_or_else(|| panic!("{}", r.stderr));
    assert!(
        note.contains("m.yaml") && note.contains("attention_window.full_every: 1"),
        "{note}"
    );
    assert!(!note.contains("--window-attn-skip-freq"), "{note}");
    // The flag over the file is named as the flag.
    let r = run_in(
        &dir,
        &[
            "plan",
            "--model",
            "m.yaml",
            "--nodes",
            "1",
            "--window-attn-skip-freq",
            "1",
        ],
    );
    assert!(
        r.stderr
            .contains("--window-attn-skip-freq 1 keeps full attention"),
        "{}",
        r.stderr
    );
}

/// `"decoder_sparse_step": 0` was called "not expressible": transformers takes
/// `(layer_idx + 1) % decoder_sparse_step`, a division by zero, so the config is invalid.
#[test]
fn a_zero_decoder_sparse_step_is_invalid() {
    let text = std::fs::read_to_string(format!("{ROOT}/models/hf/qwen1.5-moe-a2.7b.json")).unwrap();
    let config = text.replace("\"decoder_sparse_step\": 1,", "\"decoder_sparse_step\": 0,");
    assert_ne!(config, text);
    let dir = scratch("leftovers3", "sparse-step");
    let r = eval_hf(&dir, "c.json", &config);
    assert_one_line_error(
        &r,
        &["\"decoder_sparse_step\" is 0", "divides by zero", "write 1"],
        &["express"],
        "decoder_sparse_step 0",
    );
}

/// A model file whose published active parameters exceed its published total was accepted.
#[test]
fn published_active_params_above_the_total_are_refused() {
    let text = std::fs::read_to_string(format!("{ROOT}/models/gpt-oss-120b.yaml")).unwrap();
    let dir = scratch("leftovers3", "published");
    std::fs::write(
        dir.join("m.yaml"),
        text.replace(
            "published_active_params_b: 5.13 ",
            "published_active_params_b: 200  ",
        ),
    )
    .unwrap();
    let r = run_in(&dir, &["plan", "--model", "m.yaml", "--nodes", "8"]);
    assert_one_line_error(
        &r,
        &[
            "m.yaml",
            "published_active_params_b 200",
            "published_params_b 116.83",
            "rule:",
        ],
        &[],
        "active above total",
    );
}
