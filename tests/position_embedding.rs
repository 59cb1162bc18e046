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
    assert_eq!(old["time"]["step_s"], new["time"]["step_s"]);
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
