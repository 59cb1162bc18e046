//! Hostile input, round 45: round trips a user makes (`plan --emit` fed back to `eval
//! --megatron-args @FILE`, `plan --save` fed back to `eval --plan` and `report`, hand-edited plan
//! files), files and paths, and the flags of `sweep`, `compare` and `validate` at their bounds:
//! - a plan file without `etp:` (a hand-written one, or a saved one with the line removed) on a
//!   mixture-of-experts model was evaluated at etp 1 without a word, where `eval --tp --ep` without
//!   `--etp` runs Megatron-Core's default, the TP size (and names it): the same plan read 107.6 GiB
//!   (does not fit) from the file and 78.3 GiB from the flags on Mixtral 8x7B at tp 2 ep 2. A file
//!   without `etp:` now runs the framework's default, in `eval --plan` and `compare --plan` alike.
//! - `validate --top 1 --micro-batch 100` (or `--sequence-parallel`) validated the best plan's own
//!   split and dropped the flag without a word: clap's `requires = "tp"` is excused beside `--top`,
//!   which conflicts with `--tp`; without `--top` the same flags were told clap's "the following
//!   required arguments were not provided: --tp <TP>", naming neither the value nor a fix.
//! - `compare --plan A --plan B --max-memory-gib 1e9` printed its note ("is not below the 79.7 GiB
//!   of h100-sxm-80g") twice, once per file's scenario.
//! - `plan`, `sweep` and `compare` with `--recompute-modules core_attn --cpu-offload-layers 8`
//!   searched only plans without recompute and dropped the modules without a word, where `eval`
//!   refuses the pair.
//!
//! Every round-trip case checks the numbers each path prints for the same plan; every error case
//! checks exit 2, one line on stderr and the words that name the value, the rule and the fix, and
//! runs the fix.
//!
//! Looked at and found sound: `plan --emit megatron` read back by `eval --megatron-args @FILE` and
//! `plan --save` read back by `eval --plan` (tp, pp, dp, cp, ep, etp, vpp, micro-batch, recompute,
//! ZeRO, precision, step time, memory by part identical) for MoE with ep/etp, cp 2 and 4, vpp,
//! fp8 delayed, mxfp8 and nvfp4 with bf16 end layers, CPU offload, Muon, precision-aware and
//! bf16-moment optimizers, MTP on DeepSeek-V3, hybrid Mamba (Nemotron-H, Nemotron 3 Nano and Super),
//! sliding windows, DeepEP with a capacity factor (the imbalance the line cannot carry is named),
//! the MoE all-to-all overlap, every overlap switch off, HSDP replicas, block recompute, and
//! `--recompute-modules`; hand-edited plan files with a key given twice (nested and top level), a
//! key of no tpsim version, CRLF line ends, a BOM, tabs, anchors and aliases, merge keys, comments,
//! a multi-document file and one `---`/`...`-framed document; `--save -`, `--save /dev/stdout`,
//! `--plan -`, `--report`/`--out` onto an existing file; `--plan`, `--megatron-args @`, `report`
//! and `compare --plan` on a FIFO, /dev/null, a directory, an empty file and a 50 MB file; saved
//! plans and reports under names with spaces and unicode, 300-character names, 6000-character
//! paths; torchtitan plans (zbv, dualpipev with a local batch, MoE at ep 8, torch.compile with
//! mxfp8), DeepSpeed with Ulysses CP, GB200 with cross-node TP and uneven hybrid pipelines saved and
//! read back; `sweep --values` at 0, 1.5, '', a trailing comma, 2^32, a repeated point, a
//! full-width digit, network bandwidths of 0, -1, 1e-300 and 1e300, offloaded layers at and past
//! the layer count; `--chart` '', .png and a plan file; `validate --top 0`, `--ranks 0`, `--ranks`
//! below `--tp`, `--warmup -1`, `--reps 0`, `--micro-batch` 0/1.5/100000, `--backend gpu`;
//! `compare` with one and three `--plan`s, `--tp`, `--format csv/yaml`, `--nodes 0` and another
//! node count over both files, `--max-memory-gib` 0.5, `--framework` over a Muon file,
//! `--moe-imbalance` 0.5/nan and `--moe-capacity-factor` 0 and 1e308; sweep and compare printing
//! the step time and memory `plan` prints for the same point.
//!
//! Left as found: `plan --moe-imbalance` with `--emit megatron` writes a line that cannot carry the
//! imbalance, which the emit's note names with the `eval --moe-imbalance` to give beside it; a plan
//! file missing `vpp:`, `micro_batch:`, `zero:` or `ep:` takes 1, 1, 0 and 1 without a note, as the
//! bundled plans/seed-512b-32nodes.yaml relies on.

mod common;

use common::*;

const SUITE: &str = "hostile45";

/// A field of the first plan in `eval`'s JSON.
fn field(v: &serde_json::Value, path: &[&str]) -> serde_json::Value {
    let mut at = &v["plans"][0];
    for key in path {
        at = &at[*key];
    }
    at.clone()
}

/// A saved Mixtral 8x7B plan at tp 2 x ep 2 with its `etp:` line removed (as a hand-written plan
/// file leaves it out) is evaluated as the same degrees given as flags: etp = tp, Megatron-Core's
/// default, with the same step time and memory; `compare` reads the file alike.
#[test]
fn plan_file_without_etp_runs_the_frameworks_default_expert_tp() {
    let dir = scratch(SUITE, "no-etp");
    let saved = dir.join("saved.yaml");
    let r = run(&[
        "plan",
        "--model",
        "mixtral-8x7b",
        "--nodes",
        "4",
        "--global-batch",
        "256",
        "--seq-len",
        "4096",
        "--tp",
        "2",
        "--pp",
        "2",
        "--ep",
        "2",
        "--etp",
        "2",
        "--save",
        saved.to_str().unwrap(),
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let text = std::fs::read_to_string(&saved).unwrap();
    assert!(text.contains("\n  etp: 2\n"), "{text}");
    let edited = dir.join("no-etp.yaml");
    std::fs::write(&edited, text.replacen("\n  etp: 2\n", "\n", 1)).unwrap();
    let edited = edited.to_str().unwrap();

    let from_file = json(&["eval", "--plan", edited, "--format", "json"]);
    let from_saved = json(&[
        "eval",
        "--plan",
        saved.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert_eq!(field(&from_file, &["etp"]), 2, "etp defaults to tp 2");
    for path in [
        &["etp"][..],
        &["time", "step_s"],
        &["memory", "total_bytes"],
        &["memory", "activations_bytes"],
        &["memory", "optimizer_bytes"],
    ] {
        assert_eq!(
            field(&from_file, path),
            field(&from_saved, path),
            "{path:?}: the file without etp against the file with etp: 2"
        );
    }

    // compare reads both files with the same default.
    let r = run(&[
        "compare",
        "--plan",
        edited,
        "--plan",
        saved.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert!(r.code == 0, "{}", r.stderr);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    let text = v.to_string();
    assert!(
        text.contains("\"etp\":2") && !text.contains("\"etp\":1"),
        "{text}"
    );
    assert!(r.stderr.contains("are the same plan"), "{}", r.stderr);
}

/// A small model whose layer the CPU backend runs in a moment.
const SMALL: &[&str] = &[
    "--layers",
    "2",
    "--hidden",
    "256",
    "--heads",
    "8",
    "--seq-len",
    "128",
    "--nodes",
    "1",
    "--global-batch",
    "64",
    "--backend",
    "cpu",
    "--reps",
    "1",
    "--warmup",
    "0",
];

/// `validate --top 1 --micro-batch 100` ran the best plan's own micro-batch and dropped the 100
/// without a word (clap's `requires = "tp"` let it pass beside --top, which conflicts with --tp);
/// without --top it was told clap's "the following required arguments were not provided: --tp
/// <TP>", naming neither the value nor a fix. Both are refused with the value, the rule and a fix
/// that runs.
#[test]
fn validate_layer_flags_without_tp_are_refused_not_dropped() {
    let with = |extra: &[&str]| {
        let mut args = vec!["validate"];
        args.extend_from_slice(SMALL);
        args.extend_from_slice(extra);
        run(&args)
    };
    let r = with(&["--top", "1", "--micro-batch", "100"]);
    assert_one_line_error(
        &r,
        &[
            "--micro-batch 100 without --tp",
            "best plans' own splits",
            // The example runs: 100 does not split the global batch of 64, which the batch rule
            // refuses next, so it takes the largest micro-batch that does.
            "drop --top 1 and add --tp N (e.g. --tp 2 --micro-batch 64; --micro-batch 100 does not split --global-batch 64)",
        ],
        &["validating"],
        "validate --top 1 --micro-batch 100",
    );
    let r = with(&["--top", "1", "--sequence-parallel"]);
    assert_one_line_error(
        &r,
        &["--sequence-parallel without --tp", "drop --top 1"],
        &[],
        "validate --top 1 --sequence-parallel",
    );
    let r = with(&["--micro-batch", "4", "--sequence-parallel"]);
    assert_one_line_error(
        &r,
        &[
            "--micro-batch 4 --sequence-parallel without --tp: they describe",
            "e.g. --tp 2 --micro-batch 4 --sequence-parallel",
        ],
        &["required arguments", "drop --top"],
        "validate --micro-batch 4 --sequence-parallel",
    );
    // The fix runs, at the micro-batch its example gives.
    let r = with(&["--tp", "2", "--micro-batch", "64"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stderr.contains("validating tp 2 sp false micro-batch 64"),
        "{}",
        r.stderr
    );
}

/// `compare --plan A --plan B --max-memory-gib 1e9` printed its note ("is not below the 79.7 GiB
/// of h100-sxm-80g") twice, once per plan file's scenario; a note is said once.
#[test]
fn compare_says_a_shared_flags_note_once() {
    let dir = scratch(SUITE, "note-once");
    let a = dir.join("a.yaml");
    let r = run(&[
        "plan",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--global-batch",
        "64",
        "--save",
        a.to_str().unwrap(),
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let a = a.to_str().unwrap();
    let r = run(&[
        "compare",
        "--plan",
        a,
        "--plan",
        a,
        "--max-memory-gib",
        "1e9",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let note = "--max-memory-gib 1000000000 is not below the 79.7 GiB";
    assert_eq!(r.stderr.matches(note).count(), 1, "{}", r.stderr);
}

/// `plan`, `sweep` and `compare` with `--recompute-modules core_attn --cpu-offload-layers 8`
/// searched only plans without recompute (offloading needs none) and dropped the modules without
/// a word, where `eval` refuses the pair; each refuses it, and the fix runs.
#[test]
fn recompute_modules_beside_offloading_are_refused_by_the_searches() {
    let base = [
        "--model",
        "llama3-8b",
        "--global-batch",
        "64",
        "--cpu-offload-layers",
        "8",
        "--recompute-modules",
        "core_attn",
    ];
    for command in [
        vec!["plan", "--nodes", "1"],
        vec!["compare", "--nodes", "1"],
        vec!["sweep", "--axis", "nodes", "--values", "1,2"],
    ] {
        let mut args = command.clone();
        args.extend(base);
        let r = run(&args);
        assert_one_line_error(
            &r,
            &[
                "--recompute-modules core_attn with --cpu-offload-layers 8",
                "only without recompute",
                "drop --recompute-modules or --cpu-offload-layers",
            ],
            &[],
            &format!("{command:?}"),
        );
        // The fix: without the modules the offloading search runs.
        let mut fixed = command.clone();
        fixed.extend(&base[..6]);
        let r = run(&fixed);
        assert_eq!(r.code, 0, "{fixed:?}: {}", r.stderr);
    }
}
