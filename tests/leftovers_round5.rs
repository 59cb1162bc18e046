//! Leftovers of the fourth round: ZeRO-3 kept through the backward only where the framework has
//! the setting, sweep's free memory as `eval` says it, `--cp-exchange` that changes nothing in
//! `sweep` and `compare`, and a rotary percent beside latent attention.

mod common;

use common::*;
use serde_json::Value;

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

fn notes<'a>(r: &'a Run, start: &str) -> Vec<&'a str> {
    r.stderr.lines().filter(|l| l.starts_with(start)).collect()
}

/// Every plan `plan --format json` shows with `extra`, as (zero, reshard_after_forward, pp, ep).
fn zero_plans(extra: &[&str]) -> Vec<(u64, bool, u64, u64)> {
    let mut args = vec!["plan", "--top", "1000", "--format", "json"];
    args.extend(extra);
    let out = json(&args);
    out["plans"]
        .as_array()
        .expect("plans")
        .iter()
        .map(|p: &Value| {
            (
                p["zero"].as_u64().unwrap(),
                p["reshard_after_forward"].as_bool().unwrap(),
                p["pp"].as_u64().unwrap(),
                p["ep"].as_u64().unwrap_or(1),
            )
        })
        .collect()
}

const DS: &[&str] = &[
    "--model",
    "llama3-8b",
    "--nodes",
    "2",
    "--global-batch",
    "256",
    "--framework",
    "deepspeed",
];

/// `plan --framework deepspeed` searched ZeRO-3 keeping the gathered parameters through the
/// backward (`3 keep`) and ranked it first, and `--emit deepspeed` then refused that plan
/// (DeepSpeed's ZeRO-3 has no such setting) and wrote another. The search no longer proposes
/// it there; torchtitan (FSDP2 `fsdp_reshard_after_forward = "never"`) still does.
#[test]
fn deepspeed_searches_no_zero3_it_cannot_run() {
    let mut args = DS.to_vec();
    args.extend(["--zero", "3"]);
    let plans = zero_plans(&args);
    assert!(!plans.is_empty());
    assert!(
        plans.iter().all(|(z, reshard, _, _)| *z == 3 && *reshard),
        "{plans:?}"
    );
    // What plan ranks first is what --emit writes: no "cannot write #1".
    let mut emit = vec!["plan"];
    emit.extend(&args);
    emit.extend(["--emit", "deepspeed"]);
    let r = run(&emit);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!r.stderr.contains("cannot write #1"), "{}", r.stderr);
    assert!(r.stdout.contains("\"stage\": 3"), "{}", r.stdout);
    // torchtitan keeps them where it is faster.
    let mut titan: Vec<&str> = DS[..6].to_vec();
    titan.extend(["--framework", "torchtitan", "--zero", "3"]);
    assert!(
        zero_plans(&titan).iter().any(|(_, reshard, _, _)| !reshard),
        "torchtitan offers 3 keep"
    );
}

/// 2021 Megatron-LM has no FSDP to keep gathered parameters with: its search keeps none either.
/// Megatron-Core keeps them through torch FSDP2 (`--torch-fsdp2-no-reshard-after-forward`), and
/// its search still offers them.
#[test]
fn only_frameworks_with_the_setting_search_kept_zero3() {
    let plans = |framework: &str| {
        zero_plans(&[
            "--model",
            "llama3-8b",
            "--nodes",
            "2",
            "--global-batch",
            "256",
            "--zero",
            "3",
            "--framework",
            framework,
        ])
    };
    let old = plans("megatron-lm-2021");
    assert!(!old.is_empty());
    assert!(old.iter().all(|(_, reshard, _, _)| *reshard), "{old:?}");
    assert!(
        plans("megatron-core")
            .iter()
            .any(|(_, reshard, _, _)| !reshard)
    );
}

/// A pinned `--reshard-after-forward false` the framework cannot run is refused as a pinned ZeRO
/// stage it lacks is (`--zero 2 --framework torchtitan`): one line naming the pin, the rule and
/// the fix, exit 2, where it said nothing about the framework before (the search then ranked the
/// plan first).
#[test]
fn a_pinned_kept_zero3_the_framework_lacks_is_refused() {
    let mut args = vec!["plan"];
    args.extend(DS);
    args.extend(["--reshard-after-forward", "false"]);
    let r = run(&args);
    assert_one_line_error(
        &r,
        &[
            "--reshard-after-forward false",
            "--framework deepspeed cannot keep ZeRO-3's gathered parameters",
            "stage3_max_reuse_distance",
            "pin --reshard-after-forward true",
            "tpsim eval",
        ],
        &[],
        "deepspeed keep pin",
    );
}

/// `eval` still prices the kept plan under DeepSpeed, and says once that the framework has no
/// such setting; under torchtitan it says nothing.
#[test]
fn eval_prices_a_kept_zero3_the_framework_lacks_and_says_so() {
    let eval = |framework: &str| {
        run(&[
            "eval",
            "--model",
            "llama3-8b",
            "--nodes",
            "2",
            "--global-batch",
            "256",
            "--framework",
            framework,
            "--tp",
            "1",
            "--zero",
            "3",
            "--reshard-after-forward",
            "false",
            "--recompute",
            "full",
        ])
    };
    let r = eval("deepspeed");
    assert_eq!(r.code, 0, "{}", r.stderr);
    let lines = notes(&r, "note: ZeRO-3 keeping the gathered parameters");
    assert_eq!(lines.len(), 1, "{}", r.stderr);
    for words in [
        "(--reshard-after-forward false) is evaluated as asked",
        "--framework deepspeed has no such setting",
        "`tpsim plan` does not propose it",
    ] {
        assert!(lines[0].contains(words), "{words:?} in {}", lines[0]);
    }
    assert!(r.stdout.contains("step"), "{}", r.stdout);
    let r = eval("torchtitan");
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(notes(&r, "note: ZeRO-3 keeping").is_empty(), "{}", r.stderr);
}

/// `sweep`'s `free GiB` printed 0.0 where `eval` said "under 0.1 GiB free" for the same plan (the
/// printed total and capacity the same tenths, the plan fitting). The column now writes "<0.1",
/// the cell form of eval's words (a number 0.0 reads as full); the CSV keeps the bytes, a number,
/// and says the same: positive and under a tenth of a GiB.
#[test]
fn sweep_free_memory_reads_as_eval_says_it() {
    let base = [
        "sweep",
        "--model",
        "llama3-8b",
        "--global-batch",
        "64",
        "--axis",
        "nodes",
        "--values",
        "1,2",
    ];
    let out = json(&[&base[..], &["--format", "json"]].concat());
    let total = out["rows"][0]["memory"]["total_bytes"].as_f64().unwrap() / GIB;
    // A limit a hair above the best plan's memory: the same plan stays best and fits, with the
    // limit and the total printing the same tenths.
    let limit = format!("{:.3}", total + 0.002);
    assert_eq!(
        (total * 10.0).round(),
        (limit.parse::<f64>().unwrap() * 10.0).round(),
        "the test's limit {limit} prints as {total:.1}"
    );
    let limited: Vec<&str> = [&base[..], &["--max-memory-gib", limit.as_str()]].concat();
    let r = run(&limited);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let row = r
        .stdout
        .lines()
        .find(|l| l.starts_with("│ 1 "))
        .unwrap_or_else(|| panic!("{}", r.stdout));
    let cells: Vec<&str> = row.split('┆').map(|c| c.trim_matches([' ', '│'])).collect();
    assert_eq!(cells.last(), Some(&"<0.1"), "{row}");
    let sweep = json(&[&limited[..], &["--format", "json"]].concat());
    let p = &sweep["rows"][0];
    // The same plan through eval says "under 0.1".
    let mut eval = vec![
        "eval".to_string(),
        "--model".into(),
        "llama3-8b".into(),
        "--nodes".into(),
        "1".into(),
        "--global-batch".into(),
        "64".into(),
        "--max-memory-gib".into(),
        limit.clone(),
        "--recompute".into(),
        p["recompute"].as_str().unwrap().into(),
    ];
    for key in ["tp", "pp", "dp", "micro_batch", "zero"] {
        eval.push(format!("--{}", key.replace('_', "-")));
        eval.push(p[key].to_string());
    }
    if p["sequence_parallel"] == true {
        eval.push("--sequence-parallel".into());
    }
    let eval: Vec<&str> = eval.iter().map(String::as_str).collect();
    let r = run(&eval);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains("fits, under 0.1 GiB free"),
        "{}",
        r.stdout
    );
    // The CSV's free bytes: a number, positive, under 0.1 GiB.
    let csv = run(&[&limited[..], &["--format", "csv"]].concat());
    let header: Vec<&str> = csv.stdout.lines().next().unwrap().split(',').collect();
    let col = header
        .iter()
        .position(|h| *h == "memory.free_bytes")
        .unwrap();
    let free: f64 = csv_cells(csv.stdout.lines().nth(1).unwrap())[col]
        .parse()
        .unwrap();
    assert!(free > 0.0 && free < 0.1 * GIB, "{free}");
}

/// `--cp-exchange` where nothing is split: `sweep` and `compare` (and an unpinned `plan`) said
/// nothing, as `eval` and `plan --cp 1` did before them. A 2048-token sequence gives the search no
/// cp above 1 (each CP rank gets at least 2048 tokens); an 8192-token one does, and then no note.
#[test]
fn a_cp_exchange_no_plan_uses_is_said_to_change_nothing_in_sweep_and_compare() {
    let note = "note: --cp-exchange head-all-to-all changes nothing";
    let sweep = |seq: &str| {
        run(&[
            "sweep",
            "--model",
            "llama3-8b",
            "--global-batch",
            "64",
            "--axis",
            "nodes",
            "--values",
            "1,2",
            "--seq-len",
            seq,
            "--cp-exchange",
            "head-all-to-all",
        ])
    };
    let r = sweep("2048");
    assert_eq!(r.code, 0, "{}", r.stderr);
    let lines = notes(&r, note);
    assert_eq!(lines.len(), 1, "{}", r.stderr);
    for words in [
        "has cp above 1",
        "at least 2048 tokens",
        "the longest here is 2048",
        "--cp 2 or more",
        "drop --cp-exchange",
    ] {
        assert!(lines[0].contains(words), "{words:?} in {}", lines[0]);
    }
    let r = sweep("8192");
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(notes(&r, note).is_empty(), "{}", r.stderr);

    // compare's search, and plan's unpinned search, say it alike.
    for command in ["compare", "plan"] {
        let r = run(&[
            command,
            "--model",
            "llama3-8b",
            "--nodes",
            "1",
            "--global-batch",
            "64",
            "--seq-len",
            "2048",
            "--cp-exchange",
            "head-all-to-all",
        ]);
        assert_eq!(r.code, 0, "{command}: {}", r.stderr);
        assert_eq!(notes(&r, note).len(), 1, "{command}: {}", r.stderr);
    }
    // compare of two plan files with cp 1.
    let r = run(&[
        "compare",
        "--plan",
        "plans/best-512b-32nodes.yaml",
        "--plan",
        "plans/seed-512b-32nodes.yaml",
        "--cp-exchange",
        "head-all-to-all",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let lines = notes(&r, note);
    assert_eq!(lines.len(), 1, "{}", r.stderr);
    assert!(lines[0].contains("both plans have cp 1"), "{}", lines[0]);
}

const MLA_LINE: &str = "--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --seq-length 2048 --max-position-embeddings 2048 --micro-batch-size 1 --global-batch-size 64 --position-embedding-type rope --multi-latent-attention --q-lora-rank 384 --kv-lora-rank 128 --qk-head-dim 64 --qk-pos-emb-head-dim 32 --v-head-dim 64 --bf16 --rotary-percent 0.5";

/// `--megatron-args` with `--multi-latent-attention --rotary-percent 0.5` was refused with the
/// model file's words ("rotary_percent 0.5 ...; drop rotary_percent"), a key the line never had.
/// Megatron-Core's latent attention rotates with YaRN by default, which takes no rotary percent
/// (multi_latent_attention.py): the flag changes nothing, and a note says so. Under
/// `--rope-type rope` it rotates part of the rotary dimensions, which tpsim does not price: an
/// error in the line's own flags.
#[test]
fn a_rotary_percent_beside_megatron_latent_attention_reads_as_megatron_runs_it() {
    let r = run(&["eval", "--megatron-args", MLA_LINE, "--nodes", "1"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let lines = notes(&r, "note: --megatron-args: --rotary-percent 0.5");
    assert_eq!(lines.len(), 1, "{}", r.stderr);
    for words in ["YaRN", "--qk-pos-emb-head-dim", "it changes nothing"] {
        assert!(lines[0].contains(words), "{words:?} in {}", lines[0]);
    }
    // The model is priced as the same line without the flag.
    let without = MLA_LINE.replace(" --rotary-percent 0.5", "");
    let step = |args: &str| {
        let out = json(&[
            "eval",
            "--megatron-args",
            args,
            "--nodes",
            "1",
            "--format",
            "json",
        ]);
        out["plans"][0]["time"]["step_s"].as_f64().unwrap()
    };
    assert_eq!(step(MLA_LINE), step(&without));
    for rope in ["--rope-type rope", "--rope-type=rope"] {
        let line = format!("{MLA_LINE} {rope}");
        let r = run(&["eval", "--megatron-args", &line, "--nodes", "1"]);
        assert_one_line_error(
            &r,
            &[
                "--rotary-percent 0.5 with --multi-latent-attention --rope-type rope",
                "rotates 16 of the 32 rotary dimensions",
                "drop --rotary-percent",
            ],
            &["rotary_percent"],
            rope,
        );
    }
}

/// A model file's `rotary_percent` made latent attention by `--kv-lora-rank` was refused without
/// naming the file or the flag ("rotary_percent 0.5 with latent attention ... drop
/// rotary_percent"). It names both now.
#[test]
fn a_model_files_rotary_percent_beside_latent_attention_flags_names_both() {
    let dir = scratch("leftovers5", "rotary-mla");
    let llama = std::fs::read_to_string(format!("{ROOT}/models/llama3-8b.yaml")).unwrap();
    let partial = llama.replace(
        "\nposition_embedding_type: rope",
        "\nrotary_percent: 0.5\nposition_embedding_type: rope",
    );
    assert_ne!(
        partial, llama,
        "the bundled file sets position_embedding_type: rope"
    );
    std::fs::write(dir.join("partial.yaml"), partial).unwrap();
    let r = run_in(
        &dir,
        &[
            "eval",
            "--model",
            "partial.yaml",
            "--kv-lora-rank",
            "512",
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
            "partial.yaml's rotary_percent 0.5 with --kv-lora-rank 512",
            "--qk-pos-emb-head-dim",
            "drop --kv-lora-rank",
            "a model without rotary_percent",
        ],
        &[],
        "file rotary_percent with MLA flags",
    );
    // The bundled latent-attention model with a rotary_percent of its own stays refused in the
    // file's words.
    let ds = std::fs::read_to_string(format!("{ROOT}/models/deepseek-v3.yaml")).unwrap();
    std::fs::write(
        dir.join("ds.yaml"),
        ds.replacen("\nnorm:", "\nrotary_percent: 0.5\nnorm:", 1),
    )
    .unwrap();
    let r = run_in(
        &dir,
        &[
            "eval", "--model", "ds.yaml", "--nodes", "32", "--tp", "1", "--pp", "8", "--ep", "32",
        ],
    );
    assert_one_line_error(
        &r,
        &[
            "ds.yaml",
            "rotary_percent 0.5 with latent attention",
            "drop rotary_percent",
        ],
        &[],
        "MLA file with rotary_percent",
    );
}
