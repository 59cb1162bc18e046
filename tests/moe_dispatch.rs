//! The MoE token dispatcher (`--moe-dispatcher alltoall|deepep`) and routing pattern
//! (`--moe-routing random|round-robin`): what each sends, and that launch lines, plan files and
//! the emitted configurations carry them.

mod common;

use common::{assert_one_line_error, json, run, scratch};

/// `plan` for Qwen3-30B-A3B on two H100 nodes with EP 8.
const QWEN3_PLAN: &[&str] = &[
    "plan",
    "--model",
    "qwen3-30b-a3b",
    "--gpu",
    "h100-sxm-80g",
    "--nodes",
    "2",
    "--global-batch",
    "256",
    "--ep",
    "8",
];

/// `eval` on the same two nodes, for launch lines and plan files that give the model.
const EVAL_TWO_NODES: &[&str] = &["eval", "--gpu", "h100-sxm-80g", "--nodes", "2"];

/// One plan of it to `eval`: no pipeline, EP 8, full recompute, ZeRO-1 (it fits).
const QWEN3_EVAL: &[&str] = &[
    "eval",
    "--model",
    "qwen3-30b-a3b",
    "--gpu",
    "h100-sxm-80g",
    "--nodes",
    "2",
    "--global-batch",
    "256",
    "--tp",
    "1",
    "--pp",
    "1",
    "--ep",
    "8",
    "--recompute",
    "full",
    "--zero",
    "1",
];

/// `base` followed by `extra`.
fn with<'a>(base: &[&'a str], extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = base.to_vec();
    args.extend(extra);
    args
}

/// `base` with the value after `flag` replaced by `value`.
fn set<'a>(base: &[&'a str], flag: &str, value: &'a str) -> Vec<&'a str> {
    let mut args = base.to_vec();
    let at = args.iter().position(|a| *a == flag).unwrap() + 1;
    args[at] = value;
    args
}

/// The estimate of [`QWEN3_EVAL`] with `extra` flags.
fn qwen3_estimate(extra: &[&str]) -> serde_json::Value {
    json(&with(&with(QWEN3_EVAL, extra), &["--format", "json"]))["plans"][0].clone()
}

fn ep_wire_bytes(extra: &[&str]) -> f64 {
    qwen3_estimate(extra)["comm"]["ep"]["wire_bytes"]
        .as_f64()
        .unwrap()
}

/// Qwen3-30B-A3B (128 experts, top-8) on EP 8, 16 experts per GPU. The all-to-all sends each of a
/// token's 8 copies, 7/8 of them to another GPU: 7 per token. DeepEP sends one copy per GPU
/// reached: with random routing each of the 7 other GPUs is missed by all 8 draws with
/// probability C(112, 8)/C(128, 8), so 7·(1 − that) ≈ 4.67 copies; with NeMo AutoModel's
/// round-robin gate a token's 8 neighbouring experts sit on one GPU: 7/8 of a copy.
#[test]
fn deepep_sends_one_copy_per_gpu_a_token_reaches() {
    let alltoall = ep_wire_bytes(&[]);
    let random = ep_wire_bytes(&["--moe-dispatcher", "deepep"]);
    let round_robin =
        ep_wire_bytes(&["--moe-dispatcher", "deepep", "--moe-routing", "round-robin"]);
    let all_miss: f64 = (0..8)
        .map(|i| (112.0 - i as f64) / (128.0 - i as f64))
        .product();
    let expect_random = 7.0 * (1.0 - all_miss) / 7.0;
    assert!(
        (random / alltoall - expect_random).abs() < 1e-9,
        "random DeepEP / all-to-all = {} (want {expect_random})",
        random / alltoall
    );
    assert!(
        (round_robin / alltoall - 1.0 / 8.0).abs() < 1e-9,
        "round-robin DeepEP / all-to-all = {}",
        round_robin / alltoall
    );
    // The all-to-all sends every copy whatever the routing.
    let alltoall_round_robin = ep_wire_bytes(&["--moe-routing", "round-robin"]);
    assert_eq!(alltoall_round_robin, alltoall);
    // Less traffic, a shorter step; the header says which dispatcher was modelled.
    let step = |extra: &[&str]| qwen3_estimate(extra)["time"]["step_s"].as_f64().unwrap();
    assert!(step(&["--moe-dispatcher", "deepep"]) < step(&[]));
    let r = run(&with(QWEN3_EVAL, &["--moe-dispatcher", "deepep"]));
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains(
            "MoE dispatch: DeepEP, a copy per GPU holding any of the token's experts (random routing)"
        ),
        "{}",
        r.stdout
    );
}

#[test]
fn dispatch_flags_on_a_dense_model_are_refused() {
    for (flag, value) in [
        ("--moe-dispatcher", "deepep"),
        ("--moe-routing", "round-robin"),
    ] {
        let r = run(&[
            "eval",
            "--model",
            "llama3-8b",
            "--nodes",
            "1",
            "--tp",
            "8",
            "--pp",
            "1",
            flag,
            value,
        ]);
        assert_one_line_error(
            &r,
            &[&format!("{flag} {value}"), "dense", "drop"],
            &["panicked"],
            flag,
        );
    }
}

/// `--emit megatron` writes the flex dispatcher with its DeepEP backend, and `--megatron-args`
/// reads it back as DeepEP; a line asking for HybridEP, which tpsim does not model, is refused;
/// a flag that contradicts the line is refused; NeMo AutoModel's round-robin gate is refused by
/// every writer.
#[test]
fn launch_lines_carry_the_dispatcher() {
    // ZeRO-1 pinned: the plan this test is about.
    let plan = with(QWEN3_PLAN, &["--moe-dispatcher", "deepep", "--zero", "1"]);
    let r = run(&with(&plan, &["--emit", "megatron"]));
    assert_eq!(r.code, 0, "{}", r.stderr);
    let line = r.stdout.trim().to_string();
    assert!(
        line.contains("--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend deepep"),
        "{line}"
    );
    let back = json(&with(
        EVAL_TWO_NODES,
        &["--format", "json", "--megatron-args", &line],
    ));
    assert_eq!(back["training"]["moe_dispatch"]["dispatcher"], "deepep");
    assert_eq!(back["training"]["moe_dispatch"]["routing"], "random");

    let hybrid = line.replace("backend deepep", "backend hybridep");
    let r = run(&with(EVAL_TWO_NODES, &["--megatron-args", &hybrid]));
    assert_one_line_error(&r, &["hybridep", "deepep"], &["panicked"], "hybridep line");

    let r = run(&with(
        EVAL_TWO_NODES,
        &["--megatron-args", &line, "--moe-dispatcher", "alltoall"],
    ));
    assert_one_line_error(
        &r,
        &["--moe-dispatcher alltoall", "contradicts"],
        &[],
        "contradiction",
    );

    for target in ["megatron", "megatron-bridge"] {
        let r = run(&with(
            &plan,
            &["--moe-routing", "round-robin", "--emit", target],
        ));
        assert_one_line_error(&r, &["--moe-routing round-robin", "random"], &[], target);
    }
}

/// What a review of the dispatcher found, each refused or written as Megatron-Core runs it:
/// - `eval --emit` refuses the round-robin gate as `plan --emit` does;
/// - DeepEP without expert parallelism is written as the all-to-all (the flex dispatcher asserts
///   "TPxEP > 1") and reads back as what it is;
/// - Megatron-Core 0.14's `--moe-enable-deepep` reads as DeepEP, and only beside the flex type;
/// - a pasted `--moe-token-dispatcher-type alltoall` beside `--moe-dispatcher deepep` is refused;
/// - DeepEP at EP 1 is costed as the all-to-all it is written as, expert TP beside it allowed;
/// - DeepEP with expert TP (the flex dispatcher's tp x ep group, not modelled) is refused.
#[test]
fn dispatcher_edge_cases_are_written_or_refused_as_megatron_runs_them() {
    let r = run(&with(
        QWEN3_EVAL,
        &[
            "--moe-dispatcher",
            "deepep",
            "--moe-routing",
            "round-robin",
            "--emit",
            "megatron",
        ],
    ));
    assert_one_line_error(
        &r,
        &["--moe-routing round-robin", "random"],
        &[],
        "eval --emit",
    );

    // EP 1 does not fit unsharded experts: ZeRO-3.
    let ep1 = with(
        &set(&set(QWEN3_EVAL, "--ep", "1"), "--zero", "3"),
        &["--moe-dispatcher", "deepep"],
    );
    let r = run(&with(&ep1, &["--emit", "megatron"]));
    assert_eq!(r.code, 0, "{}", r.stderr);
    let line = r.stdout.trim().to_string();
    assert!(
        line.contains("--moe-token-dispatcher-type alltoall"),
        "{line}"
    );
    assert!(!line.contains("flex"), "{line}");
    let back = json(&with(
        EVAL_TWO_NODES,
        &["--format", "json", "--megatron-args", &line],
    ));
    assert_eq!(back["training"]["moe_dispatch"]["dispatcher"], "alltoall");
    // What is written is what is costed: at EP 1 DeepEP's step is the all-to-all's (one token
    // permutation each way when a GPU holds several experts, not DeepEP's one), and expert TP
    // beside it is no flex dispatcher to refuse.
    let step = |args: &[&str]| {
        json(&with(args, &["--format", "json"]))["plans"][0]["time"]["step_s"]
            .as_f64()
            .unwrap()
    };
    let ep1_alltoall = set(&set(QWEN3_EVAL, "--ep", "1"), "--zero", "3");
    assert_eq!(step(&ep1), step(&ep1_alltoall));
    let r = run(&with(&ep1, &["--etp", "2"]));
    assert_eq!(r.code, 0, "{}", r.stderr);

    let r = run(&with(
        QWEN3_PLAN,
        &["--moe-dispatcher", "deepep", "--emit", "megatron"],
    ));
    assert_eq!(r.code, 0, "{}", r.stderr);
    let flex = r.stdout.trim().to_string();
    let old_spelling = flex.replace(
        "--moe-flex-dispatcher-backend deepep",
        "--moe-enable-deepep",
    );
    let back = json(&with(
        EVAL_TWO_NODES,
        &["--format", "json", "--megatron-args", &old_spelling],
    ));
    assert_eq!(back["training"]["moe_dispatch"]["dispatcher"], "deepep");
    let without_flex = old_spelling.replace(
        "--moe-token-dispatcher-type flex",
        "--moe-token-dispatcher-type alltoall",
    );
    let r = run(&with(EVAL_TWO_NODES, &["--megatron-args", &without_flex]));
    assert_one_line_error(
        &r,
        &["--moe-enable-deepep", "flex"],
        &["panicked"],
        "enable-deepep",
    );

    let r = run(&with(
        QWEN3_EVAL,
        &[
            "--moe-token-dispatcher-type",
            "alltoall",
            "--moe-dispatcher",
            "deepep",
        ],
    ));
    assert_one_line_error(&r, &["--moe-dispatcher deepep", "alltoall"], &[], "pasted");

    let etp2 = with(
        &set(QWEN3_EVAL, "--ep", "4"),
        &["--moe-dispatcher", "deepep", "--etp", "2"],
    );
    let r = run(&etp2);
    assert_one_line_error(
        &r,
        &["--etp 2", "deepep", "--etp 1"],
        &[],
        "deepep with etp",
    );
}

/// A saved plan keeps its dispatcher and routing: `eval --plan` gives the step `plan` printed.
#[test]
fn saved_plans_keep_the_dispatcher() {
    let dir = scratch("moe-dispatch", "save");
    let path = dir.join("plan.yaml");
    let path = path.to_str().unwrap();
    let searched = json(&with(
        QWEN3_PLAN,
        &[
            "--moe-dispatcher",
            "deepep",
            "--moe-routing",
            "round-robin",
            "--save",
            path,
            "--format",
            "json",
        ],
    ));
    let text = std::fs::read_to_string(path).unwrap();
    assert!(
        text.contains("dispatcher: deepep") && text.contains("routing: round-robin"),
        "{text}"
    );
    let eval_json = |file: &str| json(&["eval", "--plan", file, "--format", "json"]);
    let back = eval_json(path);
    assert_eq!(
        back["plans"][0]["time"]["step_s"], searched["plans"][0]["time"]["step_s"],
        "eval --plan of {text}"
    );
    // Either part alone keeps the other's default; a misspelt key is named.
    let partial = dir.join("partial.yaml");
    std::fs::write(&partial, text.replace("  dispatcher: deepep\n", "")).unwrap();
    let back = eval_json(partial.to_str().unwrap());
    assert_eq!(back["training"]["moe_dispatch"]["dispatcher"], "alltoall");
    assert_eq!(back["training"]["moe_dispatch"]["routing"], "round-robin");
    let misspelt = dir.join("misspelt.yaml");
    std::fs::write(
        &misspelt,
        text.replace("routing: round-robin", "routin: round-robin"),
    )
    .unwrap();
    let r = run(&["eval", "--plan", misspelt.to_str().unwrap()]);
    assert_one_line_error(
        &r,
        &["moe_dispatch", "routin", "routing"],
        &[],
        "misspelt key",
    );
    // compare names the setting two plan files disagree on.
    let other = dir.join("alltoall.yaml");
    let other = other.to_str().unwrap();
    let r = run(&with(QWEN3_PLAN, &["--save", other]));
    assert_eq!(r.code, 0, "{}", r.stderr);
    let r = run(&["compare", "--plan", other, "--plan", path]);
    assert_one_line_error(
        &r,
        &["MoE dispatcher: alltoall against deepep (--moe-dispatcher)"],
        &[],
        "compare",
    );
}

/// DeepSeek-V3's group-limited routing (4 of 8 groups) is part of the bundled model, goes through
/// the Megatron launch line both ways, lowers what DeepEP sends across nodes, and can be lifted
/// with `--moe-router-num-groups 0`; a group count that does not divide the experts is refused.
#[test]
fn group_limited_routing_travels_and_shrinks_deepep_traffic() {
    let base = [
        "eval",
        "--model",
        "deepseek-v3",
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        "64",
        "--tp",
        "1",
        "--pp",
        "8",
        "--ep",
        "64",
        "--micro-batch",
        "1",
        "--global-batch",
        "1024",
        "--zero",
        "1",
        "--allow-uneven-pp",
        "--moe-dispatcher",
        "deepep",
        "--format",
        "json",
    ];
    let limited = json(&base);
    assert_eq!(limited["model"]["moe"]["router_groups"], 8);
    assert_eq!(limited["model"]["moe"]["router_group_topk"], 4);
    let free = json(&with(&base, &["--moe-router-num-groups", "0"]));
    assert!(free["model"]["moe"]["router_groups"].is_null());
    let ep_s = |v: &serde_json::Value| v["plans"][0]["comm"]["ep"]["time_s"].as_f64().unwrap();
    assert!(
        ep_s(&limited) < 0.8 * ep_s(&free),
        "{} vs {}",
        ep_s(&limited),
        ep_s(&free)
    );

    let plan = [
        "plan",
        "--model",
        "deepseek-v3",
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        "128",
        "--global-batch",
        "8192",
        "--emit",
        "megatron",
    ];
    let r = run(&plan);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let line = r.stdout.trim().to_string();
    assert!(
        line.contains("--moe-router-num-groups 8 --moe-router-group-topk 4"),
        "{line}"
    );
    let back = json(&[
        "eval",
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        "128",
        "--format",
        "json",
        "--megatron-args",
        &line,
    ]);
    assert_eq!(back["model"]["moe"]["router_groups"], 8);

    // Megatron-Core limits the groups only when the group top-k is set: a line with the group
    // count alone is read as unlimited routing, and says so.
    let count_only = line.replace(" --moe-router-group-topk 4", "");
    let r = run(&[
        "eval",
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        "128",
        "--format",
        "json",
        "--megatron-args",
        &count_only,
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let back: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert!(back["model"]["moe"]["router_groups"].is_null());
    assert!(
        r.stderr
            .contains("--moe-router-num-groups without --moe-router-group-topk"),
        "{}",
        r.stderr
    );

    // Either number 0, given alone, lifts the limit.
    let free_by_topk = json(&with(&base, &["--moe-router-group-topk", "0"]));
    assert!(free_by_topk["model"]["moe"]["router_groups"].is_null());
    assert_eq!(ep_s(&free_by_topk), ep_s(&free));

    // Megatron-Core scores a group by its best top-k / group-top-k experts: none below.
    let mut few = base.to_vec();
    few.extend(["--moe-router-topk", "2"]);
    assert_one_line_error(
        &run(&few),
        &["--moe-router-group-topk 4", "top-k"],
        &[],
        "top-k below group top-k",
    );

    let mut bad = base.to_vec();
    bad.extend(["--moe-router-num-groups", "3"]);
    assert_one_line_error(
        &run(&bad),
        &["--moe-router-num-groups 3", "divide"],
        &[],
        "groups",
    );
}

/// A Megatron-Core plan whose best plan leaves more than a tenth of its step in exposed MoE
/// all-to-alls says the combined 1F1B schedule would hide them and names the flag; with the flag
/// given, or for a dense model, it says nothing of it.
#[test]
fn exposed_alltoalls_point_to_the_overlap_flag() {
    let dsv3 = [
        "plan",
        "--model",
        "deepseek-v3",
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        "256",
        "--global-batch",
        "4096",
        "--top",
        "1",
    ];
    let note = |r: &common::Run| {
        r.stdout
            .lines()
            .find(|l| l.contains("exposed MoE all-to-alls"))
            .map(str::to_owned)
    };
    let r = run(&dsv3);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let line = note(&r).expect("a note on the exposed all-to-alls");
    assert!(
        line.starts_with("note: #1 spends ") && line.contains("--overlap-moe-expert-parallel-comm"),
        "{line}"
    );
    let share: f64 = line["note: #1 spends ".len()..]
        .split('%')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(share > 10.0, "{line}");
    let r = run(&[&dsv3[..], &["--overlap-moe-expert-parallel-comm"]].concat());
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(note(&r), None, "{}", r.stderr);
    let r = run(&["plan", "--params", "70B", "--nodes", "8", "--top", "1"]);
    assert_eq!(note(&r), None, "{}", r.stderr);
    // Where the schedule cannot run on the best plan (full recompute), no note points to it.
    let r = run(&[&dsv3[..], &["--recompute", "full"]].concat());
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(note(&r), None, "{}", r.stdout);
}
