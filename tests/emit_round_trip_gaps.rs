//! What an emitted launch configuration cannot carry, or left to the recipe it is applied on, and
//! what a pasted Megatron-LM line may not say: `--moe-imbalance` (a tpsim planning assumption
//! with no Megatron-LM argument) is named on stderr and reproduces the step time when given with
//! the line read back; Megatron-Bridge overrides always write the selective recompute modules;
//! `--bf16 --fp16` together is refused as Megatron-LM refuses it.

mod common;

use common::{assert_one_line_error, json, run};
use serde_json::Value;

/// Qwen3-30B-A3B on 16 H100 nodes with experts over 4 GPUs, the plan of the review's repro.
const QWEN3_MOE: &[&str] = &[
    "--nodes",
    "16",
    "--model",
    "qwen3-30b-a3b",
    "--tp",
    "2",
    "--pp",
    "2",
    "--ep",
    "4",
    "--micro-batch",
    "1",
    "--global-batch",
    "512",
    "--zero",
    "1",
];

fn with<'a>(base: &[&'a str], more: &[&'a str]) -> Vec<&'a str> {
    let mut args = base.to_vec();
    args.extend_from_slice(more);
    args
}

/// (step seconds, bytes on the most loaded GPU) of an `eval --format json` run.
fn step_and_memory(v: &Value) -> (f64, f64) {
    let plan = &v["plans"][0];
    (
        plan["time"]["step_s"].as_f64().unwrap(),
        plan["memory"]["total_bytes"].as_f64().unwrap(),
    )
}

#[test]
fn moe_imbalance_is_named_by_the_emitter_and_reproduced_when_given_with_the_line() {
    let direct = json(&with(
        &["eval"],
        &with(QWEN3_MOE, &["--moe-imbalance", "1.5", "--format", "json"]),
    ));
    let emitted = run(&with(
        &["eval"],
        &with(QWEN3_MOE, &["--moe-imbalance", "1.5", "--emit", "megatron"]),
    ));
    assert_eq!(emitted.code, 0, "{}", emitted.stderr);
    let note = emitted
        .stderr
        .lines()
        .find(|l| l.contains("--moe-imbalance"))
        .unwrap_or_else(|| panic!("no --moe-imbalance note:\n{}", emitted.stderr));
    for needle in [
        "note: ",
        "assume --moe-imbalance 1.5",
        "Megatron-LM configuration cannot carry",
        "--megatron-args",
        "--moe-imbalance 1.5`",
    ] {
        assert!(note.contains(needle), "no {needle:?} in: {note}");
    }
    // The line carries no trace of it.
    assert!(!emitted.stdout.contains("imbalance"), "{}", emitted.stdout);
    let line = emitted.stdout.trim();
    let back = |more: &[&str]| {
        json(&with(
            &["eval", "--nodes", "16", "--megatron-args", line],
            &with(more, &["--format", "json"]),
        ))
    };
    // Read back alone, the line is balanced routing: faster and smaller than what was planned.
    let balanced = step_and_memory(&back(&[]));
    let planned = step_and_memory(&direct);
    assert!(
        balanced.0 < 0.9 * planned.0 && balanced.1 < planned.1,
        "balanced {balanced:?} vs planned {planned:?}"
    );
    // With --moe-imbalance as the note says, the same step time and memory.
    let again = back(&["--moe-imbalance", "1.5"]);
    assert_eq!(step_and_memory(&again), planned);
    assert_eq!(again["training"]["moe_imbalance"], 1.5);
}

#[test]
fn moe_imbalance_note_for_bridge_plan_emit_and_capped_imbalance_only_where_routing_is_unbalanced() {
    let note_of = |args: &[&str]| {
        let r = run(args);
        assert_eq!(r.code, 0, "{args:?}: {}", r.stderr);
        r.stderr
            .lines()
            .find(|l| l.contains("--moe-imbalance"))
            .map(str::to_string)
    };
    let bridge = note_of(&with(
        &["eval"],
        &with(
            QWEN3_MOE,
            &["--moe-imbalance", "1.5", "--emit", "megatron-bridge"],
        ),
    ))
    .expect("a note for Megatron-Bridge");
    assert!(
        bridge.contains("Megatron-Bridge configuration cannot carry")
            && bridge.contains("again with --moe-imbalance 1.5"),
        "{bridge}"
    );
    // `plan --emit` says it too.
    let planned = note_of(&with(
        &["plan"],
        &with(QWEN3_MOE, &["--moe-imbalance", "1.5", "--emit", "megatron"]),
    ))
    .expect("a note for plan --emit");
    assert!(planned.contains("assume --moe-imbalance 1.5"), "{planned}");
    // A capacity factor below the imbalance caps it: the note names the value evaluated, which
    // the line's --moe-expert-capacity-factor alone does not reproduce.
    let capped = note_of(&with(
        &["eval"],
        &with(
            QWEN3_MOE,
            &[
                "--moe-imbalance",
                "1.5",
                "--moe-capacity-factor",
                "1.2",
                "--emit",
                "megatron",
            ],
        ),
    ))
    .expect("a note with a capacity factor");
    assert!(
        capped.contains("assume --moe-imbalance 1.2") && capped.contains("capacity factor"),
        "{capped}"
    );
    // Balanced routing needs nothing said.
    assert_eq!(
        note_of(&with(&["eval"], &with(QWEN3_MOE, &["--emit", "megatron"]))),
        None
    );
}

/// The `model.recompute*` overrides of `eval ... --emit megatron-bridge`.
fn bridge_recompute(args: &[&str]) -> Vec<String> {
    let r = run(&with(args, &["--emit", "megatron-bridge"]));
    assert_eq!(r.code, 0, "{args:?}: {}", r.stderr);
    r.stdout
        .lines()
        .filter(|l| l.starts_with("model.recompute"))
        .map(str::to_string)
        .collect()
}

#[test]
fn bridge_overrides_write_core_attn_so_the_recipe_modules_do_not_apply() {
    // DeepSeek-V3's Bridge recipe recomputes other modules; core_attn must be said.
    let dsv3 = [
        "eval",
        "--gpu",
        "b200-sxm-180g",
        "--nodes",
        "64",
        "--model",
        "deepseek-v3",
        "--tp",
        "2",
        "--pp",
        "8",
        "--ep",
        "32",
        "--global-batch",
        "1024",
        "--seq-len",
        "4096",
        "--micro-batch",
        "1",
        "--allow-uneven-pp",
        "--recompute-modules",
        "core_attn",
    ];
    assert_eq!(
        bridge_recompute(&dsv3),
        [
            "model.recompute_granularity=selective",
            "model.recompute_modules=[core_attn]",
            "model.recompute_method=null",
            "model.recompute_num_layers=null",
        ]
    );
    // The same plan's Megatron-LM line (no --recompute-modules: Megatron-Core's default,
    // core_attn) reads back to the same modules, step time and memory.
    let line = run(&with(&dsv3, &["--emit", "megatron"]));
    assert_eq!(line.code, 0, "{}", line.stderr);
    let back = json(&[
        "eval",
        "--gpu",
        "b200-sxm-180g",
        "--nodes",
        "64",
        "--megatron-args",
        line.stdout.trim(),
        "--format",
        "json",
    ]);
    let direct = json(&with(&dsv3, &["--format", "json"]));
    assert_eq!(step_and_memory(&back), step_and_memory(&direct));
    // A dense model's selective recompute is core_attn too, written out.
    let llama = [
        "eval",
        "--gpu",
        "b200-sxm-180g",
        "--model",
        "llama3-70b",
        "--nodes",
        "8",
        "--tp",
        "8",
        "--pp",
        "4",
        "--global-batch",
        "512",
    ];
    assert!(
        bridge_recompute(&with(&llama, &["--recompute", "selective"]))
            .contains(&"model.recompute_modules=[core_attn]".to_string())
    );
    // Under full or no recompute Megatron-Core reads no modules, so none are written.
    for recompute in ["full", "none"] {
        let lines = bridge_recompute(&with(&llama, &["--recompute", recompute]));
        assert!(
            lines
                .iter()
                .all(|l| !l.starts_with("model.recompute_modules")),
            "{recompute}: {lines:?}"
        );
    }
}

#[test]
fn a_pasted_line_with_bf16_and_fp16_is_refused_as_megatron_lm_refuses_it() {
    let line = |precision: &str| {
        format!(
            "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096 --micro-batch-size 1 --global-batch-size 256 --tensor-model-parallel-size 2 {precision}"
        )
    };
    for both in ["--bf16 --fp16", "--fp16 --bf16"] {
        let text = line(both);
        assert_one_line_error(
            &run(&["eval", "--nodes", "2", "--megatron-args", &text]),
            &[
                "--megatron-args",
                "--bf16 and --fp16",
                "Megatron-LM refuses",
                "arguments.py validate_args",
                "keep one",
            ],
            &[],
            both,
        );
    }
    // Each alone is read.
    for one in ["--bf16", "--fp16"] {
        let text = line(one);
        let r = run(&["eval", "--nodes", "2", "--megatron-args", &text]);
        assert_eq!(r.code, 0, "{one}: {}", r.stderr);
    }
}
