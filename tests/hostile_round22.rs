//! Hostile input and new-user reading, round 22: DeepSpeed-Ulysses pins in `plan`, latent
//! attention under shape flags, plan files of two frameworks in `compare`, and odd YAML values in
//! plan files. Every error case checks exit 2, one line on stderr and the words that name the
//! value, the rule and the fix.

mod common;

use common::*;

/// A saved plan of `tpsim plan` for `args`, written as `dir/name` (its text returned).
fn saved_plan(dir: &std::path::Path, name: &str, args: &[&str]) -> String {
    let mut all = vec!["plan", "--top", "1", "--save", name];
    all.extend_from_slice(args);
    let r = run_in(dir, &all);
    assert_eq!(r.code, 0, "{args:?}: {}", r.stderr);
    std::fs::read_to_string(dir.join(name)).unwrap()
}

/// DeepSpeed's Llama 3 8B plan with cp 2 on one node, saved as `dir/ds.yaml`.
fn deepspeed_plan(dir: &std::path::Path) -> String {
    saved_plan(
        dir,
        "ds.yaml",
        &[
            "--model",
            "llama3-8b",
            "--nodes",
            "1",
            "--framework",
            "deepspeed",
            "--cp",
            "2",
            "--global-batch",
            "64",
        ],
    )
}

/// `plan --framework deepspeed --cp 3` on six GPUs said only that "6 GPUs cannot be split into tp
/// x pp x dp with tp dividing the 32 heads ..." and offered `--global-batch 66`, which changes
/// nothing: the pinned cp was never named, though Ulysses's head rule is what rules it out (`eval`
/// with the same flags names it, and Megatron-Core's ring runs the same pin). The search with the
/// pin dropped finds nothing either, and the pin's reason was only looked for when it did.
#[test]
fn plan_names_the_ulysses_head_rule_where_nothing_splits_without_the_pin() {
    let r = run(&[
        "plan",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--gpus-per-node",
        "6",
        "--framework",
        "deepspeed",
        "--cp",
        "3",
        "--seq-len",
        "6144",
        "--global-batch",
        "64",
    ]);
    assert_one_line_error(
        &r,
        &[
            "--cp 3 with --framework deepspeed",
            "query heads must be a multiple of 3",
            "valid cp: 1, 2",
        ],
        &["--global-batch 66", "tp x pp x dp"],
        "plan, Ulysses cp 3",
    );
    // The same pin under Megatron-Core's ring splits the heads of no rank, and plans.
    let r = run(&[
        "plan",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--gpus-per-node",
        "6",
        "--cp",
        "3",
        "--seq-len",
        "6144",
        "--global-batch",
        "64",
        "--top",
        "1",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
}

/// `--head-dim 64` over a model with multi-head latent attention (`--kv-lora-rank 512` on Llama 3
/// 8B, or the bundled DeepSeek-V3) was read and dropped: the step time, memory and parameters were
/// those without it, for 64, 256 or none, since MLA's heads are its own widths. It is refused now,
/// with the widths that do set the heads; the model's own head width is still taken, and a pasted
/// launch line's `--kv-channels` beside `--multi-latent-attention` is read as Megatron-LM reads it.
#[test]
fn a_head_width_over_latent_attention_is_refused() {
    let r = run(&[
        "eval",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--tp",
        "4",
        "--global-batch",
        "64",
        "--kv-lora-rank",
        "512",
        "--head-dim",
        "64",
    ]);
    assert_one_line_error(
        &r,
        &[
            "--head-dim 64 with multi-head latent attention",
            "--qk-head-dim 128",
            "--qk-pos-emb-head-dim 64",
            "--v-head-dim 128",
            "changes nothing",
            "drop --head-dim",
        ],
        &[],
        "llama with MLA",
    );
    let deepseek = |head_dim: &str| {
        run(&[
            "eval",
            "--model",
            "deepseek-v3",
            "--nodes",
            "32",
            "--tp",
            "8",
            "--ep",
            "32",
            "--etp",
            "1",
            "--global-batch",
            "512",
            "--head-dim",
            head_dim,
        ])
    };
    assert_one_line_error(
        &deepseek("256"),
        &["--head-dim 256", "--v-head-dim 128", "drop --head-dim"],
        &[],
        "deepseek-v3",
    );
    let same = deepseek("128");
    assert!(same.code == 0 || same.code == 1, "{}", same.stderr);
}

/// `compare --plan ds.yaml --plan mc.yaml` of a DeepSpeed plan and a Megatron-Core plan, both in
/// bf16, listed "FP8 parameter gather: off against on (the plan files' fp8_param_gather)" among the
/// differences: a key neither file has, for a setting that moves FP8 weights only. It is named now
/// only where one of the plans computes in low precision.
#[test]
fn compare_names_fp8_parameter_gather_only_for_low_precision_plans() {
    let dir = scratch("round22", "fp8-gather");
    deepspeed_plan(&dir);
    saved_plan(
        &dir,
        "mc.yaml",
        &[
            "--model",
            "llama3-8b",
            "--nodes",
            "1",
            "--global-batch",
            "64",
        ],
    );
    let r = run_in(&dir, &["compare", "--plan", "ds.yaml", "--plan", "mc.yaml"]);
    assert_one_line_error(
        &r,
        &["different frameworks (deepspeed against megatron-core"],
        &["FP8 parameter gather", "fp8_param_gather"],
        "bf16 plans of two frameworks",
    );
}

/// A plan file's number key given something that is no number (`cp: .nan`, `cp: true`, `cp: ~`,
/// `cp: [2]`, `cp: 2_0`, `moe_imbalance: true`) was refused in serde's words alone ("invalid type:
/// boolean `true`, expected a whole number from 0 to 4294967295"), with no fix; and `global_batch:
/// -0` or `nodes: 0x0` offered `global_batch: 0` and `nodes: 0`, which are refused in turn. Each
/// now names what to write.
#[test]
fn a_plan_files_non_number_says_what_to_write() {
    let dir = scratch("round22", "non-number");
    let text = deepspeed_plan(&dir);
    let cases: [(&str, &str, &[&str]); 8] = [
        ("  cp: 2", "  cp: .nan", &["plan.cp", "NaN", "cp: 1"]),
        ("  cp: 2", "  cp: true", &["plan.cp", "boolean", "cp: 1"]),
        ("  cp: 2", "  cp: ~", &["plan.cp", "empty value", "cp: 1"]),
        ("  cp: 2", "  cp: [2]", &["plan.cp", "sequence", "cp: 1"]),
        ("  cp: 2", "  cp: 2_0", &["plan.cp", "\"2_0\"", "cp: 1"]),
        (
            "  zero: 2",
            "  zero: true",
            &["plan.zero", "boolean", "use 0, 1, 2 or 3"],
        ),
        (
            "global_batch: 64",
            "global_batch: -0",
            &["global_batch: -0", "minus sign", "global_batch: 1"],
        ),
        (
            "nodes: 1",
            "nodes: 0x0",
            &["nodes: 0x0", "hexadecimal", "nodes: 1"],
        ),
    ];
    for (from, to, needles) in cases {
        let bent = text.replacen(&format!("\n{from}\n"), &format!("\n{to}\n"), 1);
        assert_ne!(bent, text, "{to}");
        std::fs::write(dir.join("t.yaml"), bent).unwrap();
        let r = run_in(&dir, &["eval", "--plan", "t.yaml"]);
        assert_one_line_error(
            &r,
            needles,
            &["global_batch: 0", "nodes: 0;", "write nodes: 0"],
            to,
        );
        assert!(r.stderr.contains("; "), "{to}: no fix in {}", r.stderr);
    }
    let moe = saved_plan(
        &dir,
        "moe.yaml",
        &[
            "--model",
            "mixtral-8x7b",
            "--nodes",
            "2",
            "--global-batch",
            "64",
        ],
    );
    let bent = moe.replacen(
        "\nglobal_batch: 64\n",
        "\nglobal_batch: 64\nmoe_imbalance: true\n",
        1,
    );
    std::fs::write(dir.join("t.yaml"), bent).unwrap();
    let r = run_in(&dir, &["eval", "--plan", "t.yaml"]);
    assert_one_line_error(
        &r,
        &[
            "moe_imbalance",
            "boolean",
            "takes a number, written in digits",
        ],
        &[],
        "moe_imbalance: true",
    );
}

/// A head width given over a model with a partial rotary (`--head-dim 4` over GPT-NeoX-20B's
/// config, `rotary_pct: 0.25`; `--head-dim 64` over a launch line's `--rotary-percent 0.015625`)
/// was refused as "rotary_percent 0.25 rotates 1 of the 4 dimensions ...; give at least 0.5": a
/// key neither input has, and not the flag that left no pair. The flag is named now, with the
/// least head width that turns one.
#[test]
fn a_head_width_that_leaves_the_rotary_no_pair_is_named() {
    let r = run(&[
        "eval",
        "--hf-config",
        "models/hf/gpt-neox-20b.json",
        "--nodes",
        "1",
        "--tp",
        "8",
        "--global-batch",
        "64",
        "--head-dim",
        "4",
    ]);
    assert_one_line_error(
        &r,
        &[
            "--head-dim 4",
            "rotary share 0.25",
            "1 of the 4 dimensions",
            "--head-dim 8",
        ],
        &["rotary_percent"],
        "hf config, --head-dim 4",
    );
    let r = run(&[
        "eval",
        "--hf-config",
        "models/hf/gpt-neox-20b.json",
        "--nodes",
        "1",
        "--tp",
        "8",
        "--global-batch",
        "64",
        "--hidden",
        "256",
    ]);
    assert_one_line_error(
        &r,
        &[
            "--hidden 256 / --heads 64",
            "4-wide heads",
            "at least 8 wide",
        ],
        &["rotary_percent"],
        "hf config, --hidden 256",
    );
    let r = run(&[
        "eval",
        "--nodes",
        "1",
        "--megatron-args",
        "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096 --micro-batch-size 1 --global-batch-size 64 --position-embedding-type rope --tensor-model-parallel-size 4 --rotary-percent 0.015625",
        "--head-dim",
        "64",
    ]);
    assert_one_line_error(
        &r,
        &["--head-dim 64", "rotary share 0.015625", "--head-dim 128"],
        &["rotary_percent"],
        "launch line, --head-dim 64",
    );
}

/// A pasted launch line's `--context-parallel-size 2 --cp-comm-type p2p` under `--framework
/// deepspeed` was priced as DeepSpeed-Ulysses without a word (and `--cp-comm-type a2a` under
/// `--framework torchtitan` as PyTorch's all-gather), where `--cp-exchange kv-ring` beside
/// `--framework deepspeed` is refused: the framework's default replaced the line's exchange, as
/// it replaces a plan file's with a note. The line's exchange is kept now where the framework runs
/// it, and refused in the line's words where it does not. (Since leftovers round 20 a launch line
/// under `--framework torchtitan` is refused whatever its exchange: no Megatron-LM line runs
/// torchtitan; tests/leftovers_round20.rs.)
#[test]
fn a_launch_lines_cp_exchange_is_not_replaced_by_the_framework() {
    let line = |comm: &str| {
        format!(
            "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096 --micro-batch-size 1 --global-batch-size 64 --position-embedding-type rope --bf16 --context-parallel-size 2 --cp-comm-type {comm}"
        )
    };
    let eval = |framework: &str, comm: &str| {
        run(&[
            "eval",
            "--nodes",
            "1",
            "--framework",
            framework,
            "--megatron-args",
            &line(comm),
        ])
    };
    assert_one_line_error(
        &eval("deepspeed", "p2p"),
        &[
            "--cp-comm-type p2p",
            "--framework deepspeed",
            "does not run it",
            "drop --cp-comm-type",
            "--framework megatron-core",
        ],
        &[],
        "deepspeed, p2p",
    );
    assert_one_line_error(
        &eval("torchtitan", "a2a"),
        &["--framework torchtitan beside --megatron-args"],
        &[],
        "torchtitan, a2a",
    );
    // Where the framework runs the line's exchange, it is the one priced.
    let r = eval("deepspeed", "a2a");
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    assert!(r.stdout.contains("DeepSpeed-Ulysses"), "{}", r.stdout);
}
