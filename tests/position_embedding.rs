//! How a model encodes positions (`model::PositionEmbedding`): read from model files, Hugging
//! Face configs and Megatron launch lines, printed, written back, and refused when two keys
//! disagree.

mod common;

use common::{assert_one_line_error, hf_model, json, run_in, scratch};

const ONE_NODE: &[&str] = &[
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

fn eval_json(extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["eval"];
    args.extend_from_slice(extra);
    args.extend_from_slice(ONE_NODE);
    json(&args)
}

/// The step time of the first plan in a command's JSON.
fn step_s(v: &serde_json::Value) -> f64 {
    v["plans"][0]["time"]["step_s"].as_f64().unwrap()
}

/// `plan --save NAME` of Llama 3 8B on one node, with `extra` flags, in `dir`.
fn saved_llama_plan(dir: &std::path::Path, name: &str, extra: &[&str]) {
    let mut args = vec![
        "plan",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--global-batch",
        "64",
    ];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--top", "1", "--save", name]);
    let r = run_in(dir, &args);
    assert_eq!(r.code, 0, "{}", r.stderr);
}

#[test]
fn bundled_models_say_how_they_encode_positions() {
    for (model, kind, learned) in [
        ("gpt3-175b", "learned_absolute", true),
        ("bloom-176b", "alibi", false),
        ("llama3-8b", "rope", false),
        ("deepseek-v3", "rope", false),
    ] {
        let out = eval_json(&["--model", model]);
        assert_eq!(out["model"]["position_embedding_type"], kind, "{model}");
        assert_eq!(
            out["model"]["learned_position_embeddings"], learned,
            "{model}"
        );
    }
}

#[test]
fn a_model_file_with_disagreeing_position_keys_is_refused() {
    let dir = scratch("position", "disagree");
    let llama = std::fs::read_to_string(format!("{}/models/llama3-8b.yaml", common::ROOT)).unwrap();
    let file = dir.join("m.yaml");
    std::fs::write(
        &file,
        format!("{llama}\nlearned_position_embeddings: true\n"),
    )
    .unwrap();
    let r = run_in(
        &dir,
        &[
            "eval", "--model", "m.yaml", "--nodes", "1", "--tp", "8", "--pp", "1",
        ],
    );
    assert_one_line_error(
        &r,
        &[
            "position_embedding_type: rope",
            "learned_position_embeddings: true",
        ],
        &["panicked"],
        "disagreeing keys",
    );
}

#[test]
fn the_older_key_alone_still_reads_as_before() {
    let dir = scratch("position", "older");
    let gpt = std::fs::read_to_string(format!("{}/models/gpt3-175b.yaml", common::ROOT)).unwrap();
    let older = gpt.replace(
        "position_embedding_type: learned_absolute",
        "learned_position_embeddings: true",
    );
    assert_ne!(older, gpt, "the bundled file names its position encoding");
    std::fs::write(dir.join("old.yaml"), &older).unwrap();
    std::fs::write(dir.join("new.yaml"), &gpt).unwrap();
    let read = |name: &str| {
        let r = run_in(
            &dir,
            &[
                "eval", "--model", name, "--nodes", "8", "--tp", "8", "--pp", "8", "--format",
                "json",
            ],
        );
        assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
        serde_json::from_str::<serde_json::Value>(&r.stdout).unwrap()
    };
    let (old, new) = (read("old.yaml"), read("new.yaml"));
    assert_eq!(old["model"]["position_embedding_type"], "learned_absolute");
    assert_eq!(old["model"]["params"], new["model"]["params"]);
    assert_eq!(step_s(&old), step_s(&new));
}

#[test]
fn falcon_reads_its_alibi_key() {
    let dir = scratch("position", "falcon");
    let falcon =
        std::fs::read_to_string(format!("{}/models/hf/falcon-7b.json", common::ROOT)).unwrap();
    // Falcon-7B's 71 heads take no tensor parallelism.
    let read = |name: &str, config: &str| {
        std::fs::write(dir.join(name), config).unwrap();
        let r = run_in(
            &dir,
            &[
                "eval",
                "--hf-config",
                name,
                "--nodes",
                "1",
                "--tp",
                "1",
                "--pp",
                "1",
                "--global-batch",
                "64",
                "--format",
                "json",
            ],
        );
        hf_model(&r)
    };
    assert_eq!(
        read("rotary.json", &falcon)["position_embedding_type"],
        "rope"
    );
    let with_alibi = falcon.replacen('{', "{\"alibi\": true, ", 1);
    assert_eq!(
        read("alibi.json", &with_alibi)["position_embedding_type"],
        "alibi"
    );
}

#[test]
fn the_launch_line_names_the_encoding_and_reads_back() {
    for (model, written) in [
        ("bloom-176b", Some("--position-embedding-type alibi")),
        ("llama3-8b", Some("--position-embedding-type rope")),
        ("gpt3-175b", None),
    ] {
        let r = common::run(&[
            "eval", "--model", model, "--nodes", "8", "--tp", "8", "--pp", "1", "--emit",
            "megatron",
        ]);
        assert!(r.code == 0 || r.code == 1, "{model}: {}", r.stderr);
        match written {
            Some(flag) => assert!(r.stdout.contains(flag), "{model}: {}", r.stdout),
            None => assert!(
                !r.stdout.contains("--position-embedding-type"),
                "{model}: learned_absolute is Megatron-LM's default: {}",
                r.stdout
            ),
        }
    }
    let back = json(&[
        "eval",
        "--megatron-args",
        "--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --seq-length 2048 --max-position-embeddings 2048 --position-embedding-type alibi --micro-batch-size 1 --global-batch-size 8",
        "--nodes",
        "1",
        "--format",
        "json",
    ]);
    assert_eq!(back["model"]["position_embedding_type"], "alibi");
}

/// A Llama 3 70B line as `--emit megatron` writes it for 8 nodes (a plan that fits).
fn llama_line() -> String {
    let r = common::run(&[
        "eval",
        "--model",
        "llama3-70b",
        "--nodes",
        "8",
        "--tp",
        "8",
        "--pp",
        "4",
        "--global-batch",
        "256",
        "--sequence-parallel",
        "--zero",
        "1",
        "--emit",
        "megatron",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    r.stdout
        .lines()
        .rfind(|l| l.contains("--num-layers"))
        .expect("a launch line")
        .to_string()
}

fn eval_line(line: &str) -> serde_json::Value {
    json(&[
        "eval",
        "--nodes",
        "8",
        "--megatron-args",
        line,
        "--format",
        "json",
    ])
}

/// `--no-rope-fusion` was listed among the arguments that "do not change memory or time" once
/// tpsim counted the RoPE kernel: Megatron-Core then rotates Q and K with separate PyTorch
/// operators (`_apply_rotary_pos_emb_bshd`), 24 bytes per element where the fused kernel moves 4.
#[test]
fn no_rope_fusion_is_priced_and_written_back() {
    let line = llama_line();
    let fused = eval_line(&line);
    let unfused_line = format!("{line} --no-rope-fusion");
    let unfused = eval_line(&unfused_line);
    assert_eq!(fused["training"]["rope_fusion"], true);
    assert_eq!(unfused["training"]["rope_fusion"], false);
    let (a, b) = (
        fused["plans"][0]["time"]["step_s"].as_f64().unwrap(),
        unfused["plans"][0]["time"]["step_s"].as_f64().unwrap(),
    );
    assert!(b > a * 1.002 && b < a * 1.05, "fused {a} s, unfused {b} s");
    // Not among the skipped arguments any more.
    let r = common::run(&["eval", "--nodes", "8", "--megatron-args", &unfused_line]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        !r.stderr.contains("skipped: --no-rope-fusion"),
        "{}",
        r.stderr
    );
    // Written back by both emitters, and read back to the same time.
    let emitted = common::run(&[
        "eval",
        "--nodes",
        "8",
        "--megatron-args",
        &unfused_line,
        "--emit",
        "megatron",
    ]);
    assert!(
        emitted.stdout.contains("--no-rope-fusion"),
        "{}",
        emitted.stdout
    );
    let again = emitted
        .stdout
        .lines()
        .rfind(|l| l.contains("--num-layers"))
        .unwrap()
        .to_string();
    assert_eq!(
        eval_line(&again)["plans"][0]["time"]["step_s"],
        unfused["plans"][0]["time"]["step_s"]
    );
    let bridge = common::run(&[
        "eval",
        "--nodes",
        "8",
        "--megatron-args",
        &unfused_line,
        "--emit",
        "megatron-bridge",
    ]);
    assert!(
        bridge.stdout.contains("model.apply_rope_fusion=false"),
        "{}",
        bridge.stdout
    );
}

/// Megatron-LM turns the fusion off for the rotary variants (arguments.py: `if
/// args.position_embedding_type != 'rope': args.apply_rope_fusion = False`); the variant is kept,
/// and shape flags with the same type get the pasted line's price.
#[test]
fn yarn_and_mrope_lines_run_unfused() {
    let line = llama_line();
    assert!(line.contains("--position-embedding-type rope"), "{line}");
    let rope = eval_line(&line);
    for kind in ["yarn", "mrope"] {
        let variant = eval_line(&line.replace(
            "--position-embedding-type rope",
            &format!("--position-embedding-type {kind}"),
        ));
        assert_eq!(variant["training"]["rope_fusion"], false, "{kind}");
        assert_eq!(variant["model"]["position_embedding_type"], kind);
        assert!(
            step_s(&variant) > step_s(&rope),
            "{kind}: unfused is slower"
        );
    }
    // Shape flags with the same type: one price with the pasted line.
    let base = "--num-layers 8 --hidden-size 2048 --num-attention-heads 16 --seq-length 2048 --max-position-embeddings 2048 --micro-batch-size 1 --global-batch-size 64 --normalization RMSNorm --position-embedding-type yarn --bf16 --tensor-model-parallel-size 1";
    let pasted = json(&[
        "eval",
        "--nodes",
        "1",
        "--megatron-args",
        base,
        "--format",
        "json",
    ]);
    let mut flags = vec!["eval", "--nodes", "1", "--format", "json"];
    flags.extend(base.split(' '));
    let typed = json(&flags);
    assert_eq!(typed["training"]["rope_fusion"], false);
    assert_eq!(step_s(&typed), step_s(&pasted));
    // The emitted line keeps the variant and says it runs unfused by itself.
    let r = common::run(&[
        "eval",
        "--nodes",
        "1",
        "--megatron-args",
        base,
        "--emit",
        "megatron",
    ]);
    assert!(
        r.stdout.contains("--position-embedding-type yarn")
            && !r.stdout.contains("--no-rope-fusion"),
        "{}",
        r.stdout
    );
}

/// Megatron-LM's legacy `--use-rotary-position-embeddings` sets the type to rope (arguments.py
/// "Legacy RoPE arguments"); it was skipped as changing nothing, leaving a learned table.
#[test]
fn the_legacy_rotary_switch_reads_as_rope() {
    let line = llama_line().replace(
        "--position-embedding-type rope",
        "--use-rotary-position-embeddings",
    );
    let out = eval_line(&line);
    assert_eq!(out["model"]["position_embedding_type"], "rope");
    assert_eq!(
        out["model"]["params"],
        eval_line(&llama_line())["model"]["params"]
    );
}

/// `rope_fusion: false` is Megatron-Core's switch; under torchtitan it is refused, not priced
/// with Megatron's operators.
#[test]
fn rope_fusion_off_outside_megatron_core_is_refused() {
    let dir = scratch("position", "torchtitan");
    let saved = dir.join("p.yaml");
    saved_llama_plan(&dir, "p.yaml", &["--framework", "torchtitan"]);
    let text = std::fs::read_to_string(&saved).unwrap();
    std::fs::write(&saved, format!("{text}rope_fusion: false\n")).unwrap();
    let r = run_in(&dir, &["eval", "--plan", "p.yaml"]);
    assert_one_line_error(
        &r,
        &[
            "rope_fusion: false",
            "framework: torchtitan in p.yaml",
            "drop it",
        ],
        &[],
        "torchtitan rope_fusion",
    );
}

/// A plan file's `rope_fusion: false` is read, printed in the training line, and kept by
/// `plan --save`; `compare` refuses two plans that differ only in it.
#[test]
fn a_plan_files_rope_fusion_is_read_kept_and_compared() {
    let dir = scratch("position", "planfile");
    saved_llama_plan(&dir, "fused.yaml", &[]);
    let fused = std::fs::read_to_string(dir.join("fused.yaml")).unwrap();
    assert!(
        !fused.contains("rope_fusion"),
        "the default is not written: {fused}"
    );
    std::fs::write(
        dir.join("unfused.yaml"),
        format!("{fused}rope_fusion: false\n"),
    )
    .unwrap();
    let r = run_in(&dir, &["eval", "--plan", "unfused.yaml"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("unfused RoPE"), "{}", r.stdout);
    let read = |name: &str| {
        let r = run_in(&dir, &["eval", "--plan", name, "--format", "json"]);
        assert_eq!(r.code, 0, "{}", r.stderr);
        serde_json::from_str::<serde_json::Value>(&r.stdout).unwrap()
    };
    let (a, b) = (read("fused.yaml"), read("unfused.yaml"));
    assert_eq!(b["training"]["rope_fusion"], false);
    assert!(step_s(&b) > step_s(&a));
    let r = run_in(
        &dir,
        &["compare", "--plan", "fused.yaml", "--plan", "unfused.yaml"],
    );
    assert_one_line_error(&r, &["RoPE fusion: on against off"], &[], "compare");
}

/// `learned_position_embeddings: false` alone said "rotary or ALiBi", which now cost differently.
#[test]
fn the_older_key_saying_false_alone_is_refused() {
    let dir = scratch("position", "oldfalse");
    let llama = std::fs::read_to_string(format!("{}/models/llama3-8b.yaml", common::ROOT)).unwrap();
    let old = llama.replace(
        "position_embedding_type: rope",
        "learned_position_embeddings: false",
    );
    assert_ne!(old, llama);
    std::fs::write(dir.join("m.yaml"), old).unwrap();
    let r = run_in(
        &dir,
        &[
            "eval", "--model", "m.yaml", "--nodes", "1", "--tp", "8", "--pp", "1",
        ],
    );
    assert_one_line_error(
        &r,
        &[
            "learned_position_embeddings: false",
            "position_embedding_type: rope",
        ],
        &[],
        "old false",
    );
}

/// ALiBi and no position signal run no rotation: the same step.
#[test]
fn alibi_and_none_cost_the_same() {
    let base = "--num-layers 8 --hidden-size 2048 --num-attention-heads 16 --seq-length 2048 --max-position-embeddings 2048 --micro-batch-size 1 --global-batch-size 64 --bf16 --position-embedding-type";
    let alibi = eval_line(&format!("{base} alibi"));
    let none = eval_line(&format!("{base} none"));
    let rope = eval_line(&format!("{base} rope"));
    assert_eq!(step_s(&alibi), step_s(&none));
    assert!(step_s(&rope) > step_s(&none));
}

/// Models without rotary embeddings run no rotation: the switch changes nothing for them.
#[test]
fn the_fusion_switch_changes_nothing_without_rope() {
    let base = "--num-layers 8 --hidden-size 2048 --num-attention-heads 16 --seq-length 2048 --max-position-embeddings 2048 --micro-batch-size 1 --global-batch-size 64 --tensor-model-parallel-size 8 --bf16";
    let with = eval_line(base);
    let without = eval_line(&format!("{base} --no-rope-fusion"));
    assert_eq!(with["model"]["position_embedding_type"], "learned_absolute");
    assert_eq!(step_s(&with), step_s(&without));
}

/// Megatron-LM's deprecated `--no-position-embedding` raises unless the type is rope
/// (arguments.py); it was skipped as changing nothing while the learned table stayed.
#[test]
fn no_position_embedding_is_refused_as_megatron_refuses_it() {
    let base = "--num-layers 8 --hidden-size 2048 --num-attention-heads 16 --seq-length 2048 --max-position-embeddings 2048 --micro-batch-size 1 --global-batch-size 64 --bf16 --no-position-embedding";
    let r = common::run(&["eval", "--nodes", "1", "--megatron-args", base]);
    assert_one_line_error(
        &r,
        &[
            "--no-position-embedding",
            "learned_absolute",
            "--position-embedding-type none",
        ],
        &[],
        "no position embedding",
    );
    let rope = eval_line(&format!("{base} --position-embedding-type rope"));
    assert_eq!(rope["model"]["position_embedding_type"], "rope");
}

/// `compare` named two models that differ only in their position encoding "a different block
/// style (norm, biases, gating, positions, …)"; it now names the two encodings.
#[test]
fn compare_names_two_position_encodings() {
    let dir = scratch("position", "compare");
    saved_llama_plan(&dir, "a.yaml", &[]);
    let a = std::fs::read_to_string(dir.join("a.yaml")).unwrap();
    // ALiBi rotates nothing, so the rotary base (Llama 3's 500000) goes with the rotation.
    let b: String = a
        .replace(
            "position_embedding_type: rope",
            "position_embedding_type: alibi",
        )
        .lines()
        .filter(|line| !line.trim_start().starts_with("rotary_base:"))
        .map(|line| format!("{line}\n"))
        .collect();
    assert_ne!(a, b);
    std::fs::write(dir.join("b.yaml"), b).unwrap();
    let r = run_in(&dir, &["compare", "--plan", "a.yaml", "--plan", "b.yaml"]);
    assert_one_line_error(
        &r,
        &[
            "rotary positions against ALiBi positions",
            "model.position_embedding_type",
        ],
        &["block style"],
        "compare positions",
    );
}
