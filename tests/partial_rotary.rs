//! A rotary embedding on part of each head (Megatron-LM `--rotary-percent`, HF
//! `partial_rotary_factor`, GPT-NeoX `rotary_pct`): read, printed, written back, priced where it
//! changes the cost (the unfused rotation), refused where it means nothing.

mod common;
use common::{assert_one_line_error, json, run, scratch};

/// A small Llama-style launch line with rotary positions, one H100 node.
const LINE: &str = "--num-layers 8 --hidden-size 4096 --num-attention-heads 32 --group-query-attention --num-query-groups 8 --ffn-hidden-size 14336 --swiglu --normalization RMSNorm --disable-bias-linear --untie-embeddings-and-output-weights --position-embedding-type rope --seq-length 4096 --max-position-embeddings 4096 --micro-batch-size 1 --global-batch-size 64 --bf16 --use-distributed-optimizer --hidden-dropout 0 --attention-dropout 0";

fn eval_line(extra: &str) -> common::Run {
    run(&[
        "eval",
        "--nodes",
        "1",
        "--megatron-args",
        &format!("{LINE} {extra}"),
        "--format",
        "json",
    ])
}

fn step_s(j: &serde_json::Value) -> f64 {
    j["plans"][0]["time"]["step_s"].as_f64().unwrap()
}

fn parsed(r: &common::Run) -> serde_json::Value {
    assert_eq!(r.code, 0, "{}", r.stderr);
    serde_json::from_str(&r.stdout).unwrap()
}

#[test]
fn hugging_face_configs_give_their_rotated_share() {
    for (file, share, words) in [
        // GPT-NeoX-20B ships rotary_pct 0.25; GLM-4.5-Air's config leaves partial_rotary_factor to
        // Glm4MoeConfig's default, 0.5.
        (
            "models/hf/gpt-neox-20b.json",
            0.25,
            "rotary positions on 25% of each head",
        ),
        (
            "models/hf/glm-4.5-air.json",
            0.5,
            "rotary positions on 50% of each head",
        ),
    ] {
        let base = [
            "eval",
            "--hf-config",
            file,
            "--nodes",
            "8",
            "--tp",
            "8",
            "--global-batch",
            "64",
        ];
        let j = json(&[&base[..], &["--format", "json"]].concat());
        assert_eq!(j["model"]["rotary_percent"].as_f64(), Some(share), "{file}");
        let r = run(&base);
        assert!(r.stdout.contains(words), "{file}: {}", r.stdout);
        let megatron = run(&[&base[..], &["--emit", "megatron"]].concat());
        assert!(
            megatron
                .stdout
                .contains(&format!("--rotary-percent {share}")),
            "{file}: {}",
            megatron.stdout
        );
        let bridge = run(&[&base[..], &["--emit", "megatron-bridge"]].concat());
        assert!(
            bridge
                .stdout
                .contains(&format!("model.rotary_percent={share}")),
            "{file}: {}",
            bridge.stdout
        );
    }
    // A whole-head model says nothing of it and writes the default explicitly where a recipe
    // might set another.
    let llama = json(&[
        "eval",
        "--hf-config",
        "models/hf/llama-3-8b.json",
        "--nodes",
        "1",
        "--tp",
        "8",
        "--global-batch",
        "64",
        "--format",
        "json",
    ]);
    assert!(llama["model"].get("rotary_percent").is_none());
}

#[test]
fn the_unfused_rotation_costs_less_on_a_part_of_the_head() {
    let whole = parsed(&eval_line("--no-rope-fusion"));
    let half = parsed(&eval_line("--no-rope-fusion --rotary-percent 0.5"));
    assert_eq!(half["model"]["rotary_percent"].as_f64(), Some(0.5));
    assert!(
        step_s(&half) < step_s(&whole),
        "{} vs {}",
        step_s(&half),
        step_s(&whole)
    );
    // Fused, Transformer Engine's kernel reads and writes the whole head either way.
    let fused_whole = parsed(&eval_line(""));
    let fused_half = parsed(&eval_line("--rotary-percent 0.5"));
    assert!((step_s(&fused_half) - step_s(&fused_whole)).abs() < 1e-12);
    assert!(step_s(&fused_whole) < step_s(&half));
    // 1.0 is the whole head, said as nothing.
    let one = parsed(&eval_line("--rotary-percent 1.0"));
    assert!(one["model"].get("rotary_percent").is_none());
}

#[test]
fn launch_lines_round_trip_and_refuse_a_share_outside_the_head() {
    let dir = scratch("partial-rotary", "round-trip");
    let emitted = run(&[
        "eval",
        "--nodes",
        "1",
        "--megatron-args",
        &format!("{LINE} --rotary-percent 0.25"),
        "--emit",
        "megatron",
    ]);
    assert_eq!(emitted.code, 0, "{}", emitted.stderr);
    assert!(
        emitted.stdout.contains("--rotary-percent 0.25"),
        "{}",
        emitted.stdout
    );
    let file = dir.join("line.sh");
    std::fs::write(&file, &emitted.stdout).unwrap();
    let back = json(&[
        "eval",
        "--nodes",
        "1",
        "--megatron-args",
        &format!("@{}", file.display()),
        "--format",
        "json",
    ]);
    assert_eq!(back["model"]["rotary_percent"].as_f64(), Some(0.25));
    for bad in ["0", "1.5", "-0.5", "nan", "half"] {
        assert_one_line_error(
            &eval_line(&format!("--rotary-percent {bad}")),
            &["--rotary-percent", "(0, 1]"],
            &["panicked"],
            bad,
        );
    }
    // Megatron-LM reads it for rotary positions only: said, and nothing changes.
    let learned = LINE.replace("--position-embedding-type rope", "");
    let r = run(&[
        "eval",
        "--nodes",
        "1",
        "--megatron-args",
        &format!("{learned} --rotary-percent 0.5"),
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stderr.contains("--rotary-percent 0.5") && r.stderr.contains("changes nothing"));
}

#[test]
fn model_files_and_configs_refuse_a_share_that_means_nothing() {
    let dir = scratch("partial-rotary", "files");
    let model = |extra: &str| {
        let path = dir.join("m.yaml");
        std::fs::write(
            &path,
            format!(
                "name: m\nlayers: 4\nhidden: 1024\nheads: 8\nvocab: 32000\nseq_len: 2048\ngated_mlp: true\nlinear_bias: false\ndropout: false\n{extra}"
            ),
        )
        .unwrap();
        run(&[
            "eval",
            "--model",
            path.to_str().unwrap(),
            "--nodes",
            "1",
            "--dp",
            "8",
            "--global-batch",
            "64",
        ])
    };
    let ok = model("position_embedding_type: rope\nrotary_percent: 0.5\n");
    assert_eq!(ok.code, 0, "{}", ok.stderr);
    assert!(ok.stdout.contains("rotary positions on 50% of each head"));
    assert_one_line_error(
        &model("position_embedding_type: rope\nrotary_percent: 2\n"),
        &["rotary_percent 2", "(0, 1]"],
        &[],
        "above one",
    );
    assert_one_line_error(
        &model("position_embedding_type: alibi\nrotary_percent: 0.5\n"),
        &[
            "rotary_percent 0.5",
            "ALiBi",
            "position_embedding_type: rope",
        ],
        &[],
        "alibi",
    );
    // A Hugging Face config in its own words.
    let config = std::fs::read_to_string("models/hf/gpt-neox-20b.json")
        .unwrap()
        .replace("\"rotary_pct\": 0.25", "\"rotary_pct\": 0");
    let r = common::eval_hf(&dir, "neox.json", &config);
    assert_one_line_error(&r, &["\"rotary_pct\"", "(0, 1]"], &[], "rotary_pct 0");
    // plan --save keeps the share in the saved model.
    let saved = dir.join("plan.yaml");
    let r = run(&[
        "plan",
        "--hf-config",
        "models/hf/gpt-neox-20b.json",
        "--nodes",
        "8",
        "--global-batch",
        "64",
        "--save",
        saved.to_str().unwrap(),
    ]);
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    let text = std::fs::read_to_string(&saved).unwrap();
    assert!(text.contains("rotary_percent: 0.25"), "{text}");
}

/// A `partial_rotary_factor` in a config of a family that read no share was dropped (DeepSeek-V3,
/// GPT-OSS, GPT-2, Falcon): read where the positions are rotary, refused where nothing rotates
/// or latent attention's own split says the share; GPT-NeoX's later spelling is read, and a
/// disagreement with `rotary_pct` refused.
#[test]
fn every_config_family_reads_or_refuses_a_partial_rotary_factor() {
    let dir = scratch("partial-rotary", "families");
    let with = |file: &str, edit: &dyn Fn(&mut serde_json::Value)| {
        let mut config: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
        edit(&mut config);
        let path = dir.join(file.rsplit('/').next().unwrap());
        std::fs::write(&path, config.to_string()).unwrap();
        run(&[
            "eval",
            "--hf-config",
            path.to_str().unwrap(),
            "--nodes",
            "8",
            "--tp",
            "1",
            "--global-batch",
            "64",
        ])
    };
    let half = |c: &mut serde_json::Value| c["partial_rotary_factor"] = 0.5.into();
    for file in ["models/hf/gpt-oss-20b.json", "models/hf/falcon-7b.json"] {
        let r = with(file, &half);
        assert!(r.code == 0 || r.code == 1, "{file}: {}", r.stderr);
        assert!(
            r.stdout.contains("on 50% of each head"),
            "{file}: {}",
            r.stdout
        );
    }
    for (file, words) in [
        ("models/hf/deepseek-v3.json", "qk_rope_head_dim"),
        ("models/hf/gpt2.json", "rotates nothing"),
    ] {
        assert_one_line_error(
            &with(file, &half),
            &["\"partial_rotary_factor\"", "0.5", words],
            &["panicked"],
            file,
        );
    }
    let neox = "models/hf/gpt-neox-20b.json";
    let r = with(neox, &|c| {
        c.as_object_mut().unwrap().remove("rotary_pct");
        c["partial_rotary_factor"] = 0.5.into();
    });
    assert!(r.stdout.contains("on 50% of each head"), "{}", r.stderr);
    assert_one_line_error(
        &with(neox, &half),
        &["\"partial_rotary_factor\"", "\"rotary_pct\""],
        &["panicked"],
        "neox disagreeing",
    );
}

/// Two plan files that differ only in the rotated share were told apart as "a different block
/// style"; the comparison names the share now.
#[test]
fn compare_names_a_different_rotated_share() {
    let dir = scratch("partial-rotary", "compare");
    let save = |share: &str, name: &str| {
        let model = dir.join(format!("{name}.model.yaml"));
        std::fs::write(
            &model,
            format!(
                "name: m\nlayers: 4\nhidden: 1024\nheads: 8\nvocab: 32000\nseq_len: 2048\ngated_mlp: true\nlinear_bias: false\ndropout: false\nposition_embedding_type: rope\n{share}"
            ),
        )
        .unwrap();
        let plan = dir.join(format!("{name}.yaml"));
        let r = run(&[
            "plan",
            "--model",
            model.to_str().unwrap(),
            "--nodes",
            "1",
            "--global-batch",
            "64",
            "--save",
            plan.to_str().unwrap(),
        ]);
        assert_eq!(r.code, 0, "{}", r.stderr);
        plan
    };
    let (half, whole) = (save("rotary_percent: 0.5\n", "half"), save("", "whole"));
    let r = run(&[
        "compare",
        "--plan",
        half.to_str().unwrap(),
        "--plan",
        whole.to_str().unwrap(),
    ]);
    assert_one_line_error(
        &r,
        &[
            "rotary positions on 50% of each head against rotary positions on the whole head",
            "model.rotary_percent",
        ],
        &["block style"],
        "compare",
    );
    // The saved share reads back.
    let back = json(&["eval", "--plan", half.to_str().unwrap(), "--format", "json"]);
    assert_eq!(back["model"]["rotary_percent"].as_f64(), Some(0.5));
}
