//! Hostile input, round 7: defects an adversarial audit of the built binary found in sweeps over
//! GPUs, YAML merge keys and the wording of plan-file errors, one regression test each. Every
//! error case checks exit 2, one line (so no panic or backtrace) and the words that name the
//! value, the rule and the fix.

mod common;

use common::*;

/// `sweep --axis gpu --values h100-sxm-80g,clusters/h100-sxm-80g.yaml` searched the one GPU twice
/// and printed two identical rows under two labels. A GPU given twice (by name and by a profile
/// file with the same numbers) is now refused as one point given twice, naming both.
#[test]
fn a_gpu_given_by_name_and_by_its_file_is_one_point() {
    let dir = scratch("round7", "sweep-same-gpu");
    let file = format!("{ROOT}/clusters/h100-sxm-80g.yaml");
    // A copy under another name and description is still the same GPU.
    let copy =
        std::fs::read_to_string(&file)
            .unwrap()
            .replacen("name: h100-sxm-80g", "name: my-h100", 1);
    std::fs::write(dir.join("mine.yaml"), copy).unwrap();
    for values in [
        format!("h100-sxm-80g,{file}"),
        "h100-sxm-80g,mine.yaml".to_string(),
    ] {
        let r = run_in(
            &dir,
            &[
                "sweep", "--params", "7B", "--nodes", "1", "--axis", "gpu", "--values", &values,
            ],
        );
        assert_one_line_error(
            &r,
            &[
                "--values lists the same point twice (h100-sxm-80g and",
                "are one GPU profile, every number equal",
                "give each GPU once",
            ],
            &["panicked"],
            &values,
        );
        assert!(r.stdout.is_empty(), "{}", r.stdout);
    }
    // A profile whose numbers differ is another point.
    let faster = std::fs::read_to_string(&file).unwrap().replacen(
        "peak_bf16_tflops: 989.4",
        "peak_bf16_tflops: 1200",
        1,
    );
    std::fs::write(dir.join("faster.yaml"), faster).unwrap();
    let r = run_in(
        &dir,
        &[
            "sweep",
            "--params",
            "7B",
            "--nodes",
            "1",
            "--axis",
            "gpu",
            "--values",
            "h100-sxm-80g,faster.yaml",
            "--format",
            "csv",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.stdout.lines().count(), 3, "{}", r.stdout);
}

/// A YAML merge key (`<<: {tp: 8}`, `<<: *defaults`) in a plan, GPU profile, model or runs file
/// was refused as "unknown field `<<`, expected one of `tp`, `pp`, ...", as if `<<` were a typo.
/// It is now named as the merge key it is, with the fix.
#[test]
fn a_yaml_merge_key_is_named_as_one() {
    let dir = scratch("round7", "merge-key");
    let gpu = std::fs::read_to_string(format!("{ROOT}/clusters/h100-sxm-80g.yaml")).unwrap();
    let model = std::fs::read_to_string(format!("{ROOT}/models/llama3-8b.yaml")).unwrap();
    let layers = model
        .lines()
        .find(|l| l.starts_with("layers:"))
        .unwrap()
        .to_string();
    let cases: [(&str, String, &[&str]); 4] = [
        (
            "p.yaml",
            bundled_plan_with("  tp: 8", "  <<: {tp: 8}"),
            &["eval", "--plan", "p.yaml"],
        ),
        (
            "p.yaml",
            bundled_plan_with("gpu: h100-sxm-80g", "gpu: &g h100-sxm-80g").replacen(
                "\nplan:\n",
                "\nplan:\n  <<: {}\n",
                1,
            ),
            &["eval", "--plan", "p.yaml"],
        ),
        (
            "g.yaml",
            gpu.replacen("\ngpus_per_node: 8", "\n<<: {gpus_per_node: 8}", 1),
            &[
                "eval", "--params", "7B", "--nodes", "1", "--gpu", "g.yaml", "--tp", "8", "--pp",
                "1",
            ],
        ),
        (
            "m.yaml",
            model.replacen(&layers, "<<: {layers: 32}", 1),
            &[
                "eval", "--model", "m.yaml", "--nodes", "1", "--tp", "8", "--pp", "1",
            ],
        ),
    ];
    for (file, text, args) in cases {
        std::fs::write(dir.join(file), &text).unwrap();
        let r = run_in(&dir, args);
        assert_one_line_error(
            &r,
            &[
                &format!("{file}:"),
                "`<<` is a YAML merge key, which tpsim does not expand",
                "write the merged keys out in full",
            ],
            &["unknown field", "expected one of", "panicked"],
            &format!("{file}: {args:?}"),
        );
    }
}

/// A shape count of a plan file's inline model (or of a model file) was named by the shape flag
/// (`p.yaml: --seq-len = 0 must be at least 1; ... e.g. --seq-len 2048`), a flag the user never
/// typed, and the top-level `seq_len` key of the same file was left to be blamed. It is now the
/// file's key: `model.seq_len: 0` in a plan file, `layers: 0` in a model file.
#[test]
fn a_model_count_in_a_file_is_named_by_its_key() {
    let dir = scratch("round7", "model-keys");
    for (from, to, words) in [
        (
            "  seq_len: 2048",
            "  seq_len: 0",
            "p.yaml: model.seq_len: 0 must be at least 1; give the sequence length, e.g. model.seq_len: 2048",
        ),
        (
            "  layers: 112",
            "  layers: 0",
            "p.yaml: model.layers: 0 must be at least 1",
        ),
        (
            "  kv_heads: 152",
            "  kv_heads: 5",
            "p.yaml: model.kv_heads: 5 must divide model.heads: 152",
        ),
        (
            "  seq_len: 2048",
            "  seq_len: 99999999",
            "p.yaml: model.seq_len: 99999999 is larger than 16777216",
        ),
        // The counts checked before the model is built say the same keys (they said
        // `kv_heads 200 is more than heads 152`, another wording in the same file).
        (
            "  kv_heads: 152",
            "  kv_heads: 200",
            "p.yaml: model.kv_heads: 200 is more than model.heads: 152",
        ),
    ] {
        std::fs::write(dir.join("p.yaml"), bundled_plan_with(from, to)).unwrap();
        let r = run_in(&dir, &["eval", "--plan", "p.yaml"]);
        assert_one_line_error(&r, &[words], &["--seq-len", "--layers", "--kv-heads"], to);
    }
    let model = std::fs::read_to_string(format!("{ROOT}/models/llama3-8b.yaml")).unwrap();
    let layers = model
        .lines()
        .find(|l| l.starts_with("layers:"))
        .unwrap()
        .to_string();
    std::fs::write(dir.join("m.yaml"), model.replacen(&layers, "layers: 0", 1)).unwrap();
    let r = run_in(
        &dir,
        &[
            "eval", "--model", "m.yaml", "--nodes", "1", "--tp", "8", "--pp", "1",
        ],
    );
    assert_one_line_error(
        &r,
        &["m.yaml: layers: 0 must be at least 1"],
        &["--layers"],
        "model file layers: 0",
    );
    // Shape flags keep their flag words.
    let r = run(&[
        "eval", "--layers", "0", "--hidden", "4096", "--heads", "32", "--nodes", "1", "--tp", "8",
        "--pp", "1",
    ]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("--layers"), "{}", r.stderr);
}

/// Other plan-file keys were named without the file (`tokens (in the plan file) 0`,
/// `moe_imbalance in the plan file 0.5`, `recompute_num_layers 5 (in the plan file, or
/// --recompute-num-layers)`) or by a flag (`--local-batch is torchtitan's ...; drop
/// --local-batch`). Each now names the file, the key and its value, and a fix in the file's
/// words.
#[test]
fn plan_file_keys_are_named_with_the_file_and_value() {
    let dir = scratch("round7", "plan-key-words");
    let top =
        |key_line: &str| bundled_plan_with("seq_len: 2048", &format!("seq_len: 2048\n{key_line}"));
    for (text, words, absent) in [
        (
            top("tokens: 0"),
            &[
                "p.yaml: tokens: 0 must be greater than zero",
                "give a count",
            ][..],
            &["(in the plan file)"][..],
        ),
        (
            top("tokens: 1e400"),
            &["p.yaml: tokens: 1e400 is not a finite number"][..],
            &["(in the plan file)"][..],
        ),
        (
            top("moe_imbalance: 0.5"),
            &[
                "moe_imbalance: 0.5 in p.yaml: model derived-512.0b is dense",
                "delete the moe_imbalance line from p.yaml",
            ][..],
            &["in the plan file", "drop moe_imbalance"][..],
        ),
        (
            top("moe_capacity_factor: -1"),
            &[
                "moe_capacity_factor: -1 in p.yaml",
                "delete the moe_capacity_factor line",
            ][..],
            &["in the plan file"][..],
        ),
        (
            top("local_batch: 7"),
            &[
                "local_batch: 7 in p.yaml is torchtitan's local_batch_size",
                "the plan's framework (megatron-core)",
                "set framework: torchtitan or delete the local_batch line",
            ][..],
            &["--local-batch", "--framework"][..],
        ),
        (
            bundled_plan_with(
                "  allow_uneven_pp: false",
                "  allow_uneven_pp: false\n  recompute_num_layers: 5",
            ),
            &[
                "recompute_num_layers: 5 in p.yaml",
                "the file's recompute is none",
                "set recompute: full, or delete the recompute_num_layers line",
            ][..],
            &["in the plan file", "--recompute-num-layers"][..],
        ),
    ] {
        std::fs::write(dir.join("p.yaml"), &text).unwrap();
        let r = run_in(&dir, &["eval", "--plan", "p.yaml"]);
        assert_one_line_error(&r, words, absent, words[0]);
    }
    // The flags keep their flag words.
    let r = run(&[
        "eval",
        "--params",
        "7B",
        "--nodes",
        "1",
        "--tp",
        "8",
        "--pp",
        "1",
        "--local-batch",
        "4",
    ]);
    assert_one_line_error(
        &r,
        &["--local-batch is torchtitan's", "--framework megatron-core"],
        &["in p.yaml"],
        "--local-batch",
    );
}

/// A pasted launch line whose shape is no model was refused with tpsim's shape flags
/// (`--megatron-args: --kv-heads 5 must divide --heads 32`), flags the user never typed. The
/// error now speaks the line's words, as its plan errors do since round 6.
#[test]
fn a_launch_line_shape_error_names_the_megatron_flags() {
    let base = "--num-layers 32 --num-attention-heads 32 --seq-length 2048 \
                --global-batch-size 64 --micro-batch-size 1 --bf16";
    for (extra, want, not) in [
        (
            "--hidden-size 4096 --group-query-attention --num-query-groups 5",
            "--megatron-args: --num-query-groups 5 must divide --num-attention-heads 32",
            "--kv-heads",
        ),
        (
            "--hidden-size 4097",
            "--megatron-args: --hidden-size 4097 is not divisible by --num-attention-heads 32",
            "--heads ",
        ),
    ] {
        let r = run(&[
            "eval",
            "--nodes",
            "1",
            "--megatron-args",
            &format!("{base} {extra}"),
        ]);
        assert_one_line_error(&r, &[want], &[not, "panicked"], extra);
    }
}

/// A pasted launch line asking for a low-precision format the GPU lacks named tpsim's
/// `--precision nvfp4` and offered `use bf16, fp8`, words the line never had. It now names the
/// switch that chose the format and, for each format the GPU has, the switches that train at it
/// as `--emit megatron` writes them.
#[test]
fn a_launch_line_precision_error_names_the_megatron_switches() {
    let base = "--num-layers 4 --hidden-size 1024 --num-attention-heads 8 --seq-length 2048 \
                --micro-batch-size 1 --global-batch-size 8 --bf16";
    let h100_fix = "use --bf16 alone, or --fp8-format hybrid --fp8-recipe tensorwise";
    for (gpu, extra, want, fix) in [
        (
            "h100-sxm-80g",
            "--fp4-format e2m1",
            "--megatron-args: --fp4-format (nvfp4): the h100-sxm-80g has no nvfp4 tensor cores",
            h100_fix,
        ),
        (
            "h100-sxm-80g",
            "--fp8-format e4m3 --fp8-recipe mxfp8",
            "--megatron-args: --fp8-recipe mxfp8 (mxfp8): the h100-sxm-80g has no mxfp8 tensor cores",
            h100_fix,
        ),
        (
            "a100-sxm-80g",
            "--fp8-format hybrid --fp8-recipe tensorwise",
            "--megatron-args: --fp8-format (fp8): the a100-sxm-80g has no fp8 tensor cores",
            "use --bf16 alone",
        ),
    ] {
        let r = run(&[
            "eval",
            "--nodes",
            "1",
            "--gpu",
            gpu,
            "--megatron-args",
            &format!("{base} {extra}"),
        ]);
        assert_one_line_error(
            &r,
            &[want, fix],
            &["--precision", "e4m3:", "panicked"],
            extra,
        );
    }
}

/// `--tokens 1` (far less than one step's 3.1M tokens) printed `time to train: 0.0 h`, a
/// rounded zero with no word on why. A budget below one step takes that one step, and the line
/// now says so, in seconds; short budgets read in minutes, not as 0.0 h.
#[test]
fn a_token_budget_below_one_step_says_it_takes_one_step() {
    let eval = |tokens: &str| {
        run(&[
            "eval", "--params", "7B", "--nodes", "1", "--tp", "1", "--pp", "1", "--tokens", tokens,
        ])
    };
    let r = eval("1");
    // Exit 1: this plan does not fit on one node; `eval` still prints its breakdown.
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    let line = r
        .stdout
        .lines()
        .find(|l| l.starts_with("time to train:"))
        .expect("a time-to-train line");
    assert!(
        line.ends_with(" s (one step: the token budget is no more than a step's 3.1M tokens)"),
        "{line}"
    );
    assert!(!line.contains("0.0 h"), "{line}");
    let r = eval("10M");
    assert!(
        r.stdout
            .contains("time to train: 2.6 min (10M tokens in 4 steps of 3.1M tokens at "),
        "{}",
        r.stdout
    );
}

/// A plan file's `recompute_modules: [bogus]` was reported at the file's first key (`p.yaml:7:1`),
/// lines away from the entry, because the list was checked only once read whole. Each entry is
/// now checked as it is read: the error points at the list's own line.
#[test]
fn a_bad_recompute_module_is_reported_at_its_line() {
    let dir = scratch("round7", "module-line");
    let plan = std::fs::read_to_string(format!("{ROOT}/plans/best-512b-32nodes.yaml")).unwrap();
    let line = plan.lines().count() + 1;
    std::fs::write(
        dir.join("p.yaml"),
        format!("{plan}recompute_modules: [moe_act, bogus]\n"),
    )
    .unwrap();
    let r = run_in(&dir, &["eval", "--plan", "p.yaml"]);
    assert_one_line_error(
        &r,
        &[
            &format!("p.yaml:{line}:"),
            "recompute_modules: 'bogus' is not a module Megatron-Core recomputes",
        ],
        &["recompute_modules: recompute_modules"],
        "recompute_modules: [moe_act, bogus]",
    );
}
