//! Megatron-Core's other context-parallel exchanges (`--cp-exchange kv-all-gather|head-all-to-all`,
//! its `--cp-comm-type all_gather|a2a`): priced, read from launch lines, written back, refused
//! where Transformer Engine refuses them.

mod common;
use common::{assert_one_line_error, json, run, scratch};

/// Llama 3 8B, 64K tokens over 8 CP ranks on one H100 node, every layer recomputed.
const EVAL: &[&str] = &[
    "eval",
    "--model",
    "llama3-8b",
    "--nodes",
    "1",
    "--tp",
    "1",
    "--cp",
    "8",
    "--dp",
    "1",
    "--micro-batch",
    "1",
    "--global-batch",
    "8",
    "--seq-len",
    "65536",
    "--zero",
    "1",
    "--recompute",
    "full",
];

fn eval_json(exchange: &str) -> serde_json::Value {
    let mut args: Vec<&str> = EVAL.to_vec();
    args.extend(["--cp-exchange", exchange, "--format", "json"]);
    json(&args)
}

fn step_s(j: &serde_json::Value) -> f64 {
    j["plans"][0]["time"]["step_s"].as_f64().unwrap()
}

fn cp_comm(j: &serde_json::Value) -> (f64, f64, f64) {
    let p = &j["plans"][0];
    (
        p["comm"]["cp"]["wire_bytes"].as_f64().unwrap(),
        p["comm"]["cp"]["time_s"].as_f64().unwrap(),
        p["time"]["cp_comm_exposed_s"].as_f64().unwrap(),
    )
}

#[test]
fn all_gather_moves_the_rings_bytes_but_hides_none_of_them() {
    let ring = eval_json("kv-ring");
    let gather = eval_json("kv-all-gather");
    assert_eq!(gather["training"]["cp_exchange"], "kv-all-gather");
    let (ring_bytes, _, ring_exposed) = cp_comm(&ring);
    let (gather_bytes, gather_s, gather_exposed) = cp_comm(&gather);
    // Each rank's K/V reaches the other cp − 1 ranks once per pass either way, and dK/dV return.
    assert!(
        (gather_bytes - ring_bytes).abs() < 1e-6 * ring_bytes,
        "{gather_bytes} vs {ring_bytes}"
    );
    // Transformer Engine's all-gather is synchronous: the whole of it is on the critical path.
    assert!((gather_exposed - gather_s).abs() < 1e-12);
    assert!(gather_exposed > 2.0 * ring_exposed);
    assert!(step_s(&gather) > step_s(&ring));
}

#[test]
fn all_to_all_carries_q_k_v_and_the_output_once_per_pass() {
    // Per layer and micro-batch, 8,192 tokens on a rank: Q and the output 4,096 columns each,
    // K and V 1,024 each, bf16; (cp − 1)/cp of each leaves the rank in forward, in backward and
    // in full recompute's second forward.
    let tokens = 65536.0 / 8.0;
    let tensors = tokens * (4096.0 + 1024.0 + 1024.0 + 4096.0) * 2.0;
    let per_pass = 7.0 / 8.0 * tensors * 32.0 * 8.0;
    let j = eval_json("head-all-to-all");
    let (bytes, time_s, exposed) = cp_comm(&j);
    assert!(
        (bytes - 3.0 * per_pass).abs() < 1.0,
        "{bytes} vs {}",
        3.0 * per_pass
    );
    assert!((exposed - time_s).abs() < 1e-12);
    // Without recompute (it does not fit, exit 1, but is priced): forward and backward only.
    let mut args: Vec<&str> = EVAL.to_vec();
    let at = args.iter().position(|a| *a == "full").unwrap();
    args[at] = "none";
    args.extend(["--cp-exchange", "head-all-to-all", "--format", "json"]);
    let (none_bytes, _, _) = cp_comm(&json(&args));
    assert!((none_bytes - 2.0 * per_pass).abs() < 1.0, "{none_bytes}");
    // The table names the exchange and says nothing hides it.
    let mut text: Vec<&str> = EVAL.to_vec();
    text.extend(["--cp-exchange", "head-all-to-all"]);
    let r = run(&text);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("--cp-comm-type a2a"), "{}", r.stdout);
    assert!(r.stdout.contains("CP comm") && r.stdout.contains("nothing hides it"));
}

#[test]
fn all_to_all_needs_cp_to_split_each_tp_ranks_heads() {
    // Llama 3 70B: 64 query and 8 K/V heads; tp 8 leaves one K/V head per rank.
    let r = run(&[
        "eval",
        "--model",
        "llama3-70b",
        "--nodes",
        "4",
        "--tp",
        "8",
        "--cp",
        "4",
        "--dp",
        "1",
        "--global-batch",
        "8",
        "--seq-len",
        "131072",
        "--cp-exchange",
        "head-all-to-all",
    ]);
    assert_one_line_error(
        &r,
        &[
            "--cp 4",
            "8 query and 1 K/V heads",
            "valid cp: 1",
            "kv-ring",
        ],
        &["panicked"],
        "a2a with too few heads",
    );
    // The search proposes no such plan: every cp > 1 it keeps splits the heads.
    let j = json(&[
        "plan",
        "--model",
        "llama3-70b",
        "--nodes",
        "8",
        "--global-batch",
        "16",
        "--seq-len",
        "131072",
        "--cp-exchange",
        "head-all-to-all",
        "--top",
        "50",
        "--format",
        "json",
    ]);
    let plans = j["plans"].as_array().unwrap();
    assert!(!plans.is_empty());
    let mut with_cp = 0;
    for p in plans {
        let (tp, cp) = (
            p["plan"]["tp"]
                .as_u64()
                .unwrap_or(p["tp"].as_u64().unwrap_or(0)),
            p["plan"]["cp"]
                .as_u64()
                .unwrap_or(p["cp"].as_u64().unwrap_or(0)),
        );
        if cp > 1 {
            with_cp += 1;
            assert!((64 / tp) % cp == 0 && (8 / tp).max(1) % cp == 0, "{p}");
        }
    }
    assert!(with_cp > 0, "the search kept some CP plans");
}

#[test]
fn launch_lines_read_and_write_the_cp_comm_type() {
    let line = "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --group-query-attention --num-query-groups 8 --ffn-hidden-size 14336 --swiglu --normalization RMSNorm --disable-bias-linear --untie-embeddings-and-output-weights --position-embedding-type rope --seq-length 65536 --max-position-embeddings 65536 --micro-batch-size 1 --global-batch-size 8 --context-parallel-size 8 --bf16 --use-distributed-optimizer --recompute-granularity full --recompute-method uniform --recompute-num-layers 1";
    let eval_line = |extra: &str| {
        run(&[
            "eval",
            "--nodes",
            "1",
            "--megatron-args",
            &format!("{line} {extra}"),
            "--format",
            "json",
        ])
    };
    // One type per layer, the same for all 32, reads as that type.
    let per_layer = ["a2a"; 32].join(" ");
    for (value, exchange) in [
        ("p2p", "kv-ring"),
        ("all_gather", "kv-all-gather"),
        ("a2a", "head-all-to-all"),
        (per_layer.as_str(), "head-all-to-all"),
        ("=a2a", "head-all-to-all"),
    ] {
        let r = eval_line(&format!(
            "--cp-comm-type{}{value}",
            if value.starts_with('=') { "" } else { " " }
        ));
        assert_eq!(r.code, 0, "{value}: {}", r.stderr);
        let j: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
        assert_eq!(j["training"]["cp_exchange"], exchange, "{value}");
    }
    for (value, needles) in [
        (
            "allgather",
            &["all_gather", "Unsupported communication type"][..],
        ),
        (
            "a2a+p2p",
            &["a2a+p2p", "not modelled", "p2p, all_gather or a2a"][..],
        ),
        (
            "p2p a2a",
            &[
                "2 types for 32 layers",
                "--num-layers (32)",
                "one of p2p, all_gather, a2a",
            ][..],
        ),
        ("ring", &["\"ring\"", "p2p, all_gather, a2a"][..]),
    ] {
        let r = eval_line(&format!("--cp-comm-type {value}"));
        assert_one_line_error(&r, needles, &["panicked"], value);
    }
    // What --emit megatron writes reads back as the same plan at the same step time.
    let dir = scratch("cp-comm-types", "round-trip");
    let mut args: Vec<&str> = EVAL.to_vec();
    args.extend(["--cp-exchange", "head-all-to-all", "--emit", "megatron"]);
    let emitted = run(&args);
    assert_eq!(emitted.code, 0, "{}", emitted.stderr);
    assert!(
        emitted.stdout.contains("--cp-comm-type a2a"),
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
    let direct = eval_json("head-all-to-all");
    assert_eq!(back["training"]["cp_exchange"], "head-all-to-all");
    assert!(
        (step_s(&back) - step_s(&direct)).abs() < 1e-9 * step_s(&direct),
        "{} vs {}",
        step_s(&back),
        step_s(&direct)
    );
}

#[test]
fn sliding_windows_need_the_all_gather_or_the_all_to_all() {
    // GPT-OSS-20B attends over 128-token windows on every other layer.
    let base = [
        "eval",
        "--model",
        "gpt-oss-20b",
        "--nodes",
        "1",
        "--tp",
        "1",
        "--cp",
        "2",
        "--dp",
        "4",
        "--ep",
        "8",
        "--global-batch",
        "8",
        "--seq-len",
        "16384",
    ];
    let r = run(&base);
    assert_one_line_error(
        &r,
        &["--cp 2", "sliding", "kv-all-gather or head-all-to-all"],
        &["panicked"],
        "ring with windows",
    );
    for exchange in ["kv-all-gather", "head-all-to-all"] {
        let mut args = base.to_vec();
        args.extend(["--cp-exchange", exchange]);
        let r = run(&args);
        assert!(r.code == 0 || r.code == 1, "{exchange}: {}", r.stderr);
        assert!(r.stdout.contains("CP comm"), "{exchange}: {}", r.stdout);
    }
}

#[test]
fn only_megatron_core_runs_them_and_nemo_cannot_write_them() {
    let mut args: Vec<&str> = EVAL.to_vec();
    args.extend([
        "--framework",
        "torchtitan",
        "--cp-exchange",
        "kv-all-gather",
    ]);
    assert_one_line_error(
        &run(&args),
        &[
            "kv-all-gather",
            "--cp-comm-type all_gather",
            "--framework megatron-core",
        ],
        &["panicked"],
        "torchtitan with TE's all-gather",
    );
    let mut args: Vec<&str> = EVAL.to_vec();
    args.extend(["--cp-exchange", "kv-all-gather", "--emit", "nemo"]);
    assert_one_line_error(
        &run(&args),
        &["NeMo 1.x", "--emit megatron-bridge"],
        &["panicked"],
        "NeMo fragment",
    );
    let mut args: Vec<&str> = EVAL.to_vec();
    args.extend([
        "--cp-exchange",
        "kv-all-gather",
        "--emit",
        "megatron-bridge",
    ]);
    let r = run(&args);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains("model.cp_comm_type=all_gather"),
        "{}",
        r.stdout
    );
}

#[test]
fn a_saved_plan_keeps_its_exchange() {
    let dir = scratch("cp-comm-types", "saved");
    let file = dir.join("plan.yaml");
    let file_s = file.display().to_string();
    let mut args: Vec<&str> = EVAL.to_vec();
    args[0] = "plan";
    // plan takes the pins; --save writes the best plan with its exchange.
    args.extend(["--cp-exchange", "kv-all-gather", "--save", &file_s]);
    let r = run(&args);
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("cp_exchange: kv-all-gather"), "{text}");
    let back = json(&["eval", "--plan", &file_s, "--format", "json"]);
    assert_eq!(back["training"]["cp_exchange"], "kv-all-gather");
    // The saved best plan, evaluated, takes what the search gave it.
    let mut searched: Vec<&str> = EVAL.to_vec();
    searched[0] = "plan";
    searched.extend(["--cp-exchange", "kv-all-gather", "--format", "json"]);
    let best = json(&searched);
    assert!(
        (step_s(&back) - step_s(&best)).abs() < 1e-9 * step_s(&best),
        "{} vs {}",
        step_s(&back),
        step_s(&best)
    );
}

/// A Llama-3-8B-shaped launch line of 32 layers, `cp` CP ranks, without `--cp-comm-type`.
fn launch_line(cp: u32, extra: &str) -> common::Run {
    run(&[
        "eval",
        "--nodes",
        "1",
        "--megatron-args",
        &format!(
            "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --group-query-attention --num-query-groups 8 --ffn-hidden-size 14336 --swiglu --normalization RMSNorm --disable-bias-linear --untie-embeddings-and-output-weights --position-embedding-type rope --seq-length 65536 --max-position-embeddings 65536 --micro-batch-size 1 --global-batch-size 8 --context-parallel-size {cp} --bf16 --use-distributed-optimizer --recompute-granularity full --recompute-method uniform --recompute-num-layers 1 --hidden-dropout 0 --attention-dropout 0 {extra}"
        ),
        "--format",
        "json",
    ])
}

/// `--cp-comm-type a2a a2a` on 32 layers was read as a2a, though Megatron-Core's
/// TransformerConfig asserts a list has one type per layer; `--cp-comm-type=a2a a2a` took the
/// second word as a type, where argparse takes none after `=`; and without CP (which Megatron-Core
/// neither checks nor passes on) a per-layer list or `allgather` was refused. Now: the list's
/// length is checked, the `=` form takes its one value, and cp 1 reads what it can.
#[test]
fn a_cp_comm_type_list_is_one_type_per_layer_and_cp_1_refuses_none() {
    assert_one_line_error(
        &launch_line(8, "--cp-comm-type a2a a2a"),
        &[
            "--cp-comm-type a2a a2a",
            "2 types for 32 layers",
            "--num-layers (32)",
        ],
        &["panicked"],
        "a list of 2 on 32 layers",
    );
    let r = launch_line(8, "--cp-comm-type=a2a a2a");
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stderr.contains("\"a2a\" after --cp-comm-type=a2a"),
        "{}",
        r.stderr
    );
    let j: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(j["training"]["cp_exchange"], "head-all-to-all");
    for value in ["allgather", "p2p a2a", "ring"] {
        let r = launch_line(1, &format!("--cp-comm-type {value}"));
        assert!(r.code == 0 || r.code == 1, "{value}: {}", r.stderr);
        assert!(!r.stderr.contains("error"), "{value}: {}", r.stderr);
    }
    // a2a+p2p needs --hierarchical-context-parallel-sizes whatever the CP size (arguments.py).
    assert_one_line_error(
        &launch_line(1, "--cp-comm-type a2a+p2p"),
        &["a2a+p2p", "not modelled"],
        &["panicked"],
        "a2a+p2p without CP",
    );
}

/// The a2a heads error offered `--cp-exchange kv-ring`, which a model with sliding windows
/// refuses (GPT-OSS): it now offers the all-gather there. A pinned `plan` said only that the pins
/// "each admit valid plans but not together" (or listed cp values without the rule): it now says
/// the heads rule, as `eval` does.
#[test]
fn the_heads_rule_offers_an_exchange_the_model_runs_and_plan_pins_name_it() {
    let r = run(&[
        "eval",
        "--model",
        "gpt-oss-120b",
        "--nodes",
        "2",
        "--tp",
        "2",
        "--cp",
        "8",
        "--dp",
        "1",
        "--ep",
        "8",
        "--global-batch",
        "8",
        "--seq-len",
        "65536",
        "--cp-exchange",
        "head-all-to-all",
    ]);
    assert_one_line_error(
        &r,
        &[
            "32 query and 4 K/V heads",
            "valid cp: 1, 2, 4",
            "kv-all-gather",
        ],
        &["kv-ring", "panicked"],
        "GPT-OSS a2a heads",
    );
    let plan = |pins: &[&str]| {
        let mut args = vec![
            "plan",
            "--model",
            "llama3-70b",
            "--nodes",
            "4",
            "--global-batch",
            "8",
            "--seq-len",
            "131072",
            "--cp-exchange",
            "head-all-to-all",
        ];
        args.extend(pins);
        run(&args)
    };
    assert_one_line_error(
        &plan(&["--tp", "8", "--cp", "4"]),
        &[
            "--cp 4",
            "tp 8 leaves 8 query and 1 K/V heads",
            "valid cp: 1",
            "kv-ring or kv-all-gather",
        ],
        &["not together", "panicked"],
        "pinned tp and cp",
    );
    assert_one_line_error(
        &plan(&["--cp", "16"]),
        &[
            "--cp 16",
            "64 query and 8 K/V heads",
            "valid cp: 1, 2, 4, 8",
        ],
        &["panicked"],
        "pinned cp",
    );
}

/// GPT-OSS's attention sinks (`softmax_type = "learnable"`, which Megatron-Bridge's GPT-OSS
/// provider sets and tpsim's model leaves out) run under Transformer Engine's context parallelism
/// only with a2a (`attn_forward_func_with_cp`). Megatron-Bridge overrides with
/// `model.cp_comm_type=all_gather` on a GPT-OSS recipe failed at start; they are refused now, and
/// the Megatron-LM line's note no longer tells the user to add the sinks beside all_gather.
#[test]
fn gpt_oss_sinks_need_the_all_to_all_in_emitted_configs() {
    let emit = |exchange: &str, target: &str| {
        run(&[
            "eval",
            "--model",
            "gpt-oss-20b",
            "--nodes",
            "1",
            "--tp",
            "1",
            "--cp",
            "2",
            "--dp",
            "4",
            "--ep",
            "8",
            "--global-batch",
            "8",
            "--seq-len",
            "16384",
            "--cp-exchange",
            exchange,
            "--emit",
            target,
        ])
    };
    assert_one_line_error(
        &emit("kv-all-gather", "megatron-bridge"),
        &[
            "--cp-exchange kv-all-gather",
            "softmax_type learnable",
            "only with cp_comm_type a2a",
            "--cp-exchange head-all-to-all",
        ],
        &["panicked"],
        "bridge GPT-OSS all_gather",
    );
    let r = emit("head-all-to-all", "megatron-bridge");
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    assert!(r.stdout.contains("model.cp_comm_type=a2a"), "{}", r.stdout);
    let r = emit("kv-all-gather", "megatron");
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    assert!(
        r.stdout.contains("--cp-comm-type all_gather"),
        "{}",
        r.stdout
    );
    assert!(
        r.stderr
            .contains("but not --softmax-type learnable beside --context-parallel-size 2"),
        "{}",
        r.stderr
    );
    let r = emit("head-all-to-all", "megatron");
    assert!(!r.stderr.contains("but not --softmax-type"), "{}", r.stderr);
}

/// The layout figure said every CP group is a ring passing K/V; under the all-gather and the
/// all-to-all it says what they move.
#[test]
fn the_layout_figure_names_what_the_cp_groups_move() {
    let dir = scratch("cp-comm-types", "layout");
    for (exchange, words) in [
        ("kv-ring", "rings of 8 GPUs at stride 1 pass K/V"),
        (
            "kv-all-gather",
            "groups of 8 GPUs at stride 1 all-gather K/V",
        ),
        (
            "head-all-to-all",
            "groups of 8 GPUs at stride 1 trade Q, K, V and the attention output",
        ),
    ] {
        let out = dir.join(exchange);
        let mut args: Vec<&str> = EVAL.to_vec();
        let out_s = out.display().to_string();
        args.extend(["--cp-exchange", exchange, "--report", &out_s]);
        let r = run(&args);
        assert_eq!(r.code, 0, "{exchange}: {}", r.stderr);
        let svg = std::fs::read_to_string(out.join("layout.svg")).unwrap();
        assert!(svg.contains(words), "{exchange}: {svg}");
        // tp 1: the blue outline holds one group, nothing interleaved ("of 1 interleaved
        // groups" before).
        let group = if exchange == "kv-ring" {
            "ring"
        } else {
            "group"
        };
        assert!(
            svg.contains(&format!("blue: one CP {group}"))
                && svg.contains(&format!("the 8 GPUs of one {group}"))
                && !svg.contains("of 1 interleaved"),
            "{exchange}: {svg}"
        );
    }
}

/// Megatron-Core's selective recompute (`core_attn`) re-runs Transformer Engine's attention with
/// its CP exchange inside, as full recompute does; torchtitan's per-op SAC keeps the attention
/// output and exchanges nothing again.
#[test]
fn selective_recompute_repeats_the_forward_exchange_under_megatron_core() {
    let bytes = |exchange: &str, recompute: &str, framework: &str| {
        let mut args: Vec<&str> = EVAL.to_vec();
        let at = args.iter().position(|a| *a == "full").unwrap();
        args[at] = recompute;
        // torchtitan shards the states over the cp ranks whenever cp > 1: ZeRO-3 there.
        if framework == "torchtitan" {
            let zero = args.iter().position(|a| *a == "--zero").unwrap();
            args[zero + 1] = "3";
        }
        args.extend([
            "--cp-exchange",
            exchange,
            "--framework",
            framework,
            "--format",
            "json",
        ]);
        cp_comm(&json(&args)).0
    };
    for exchange in ["kv-ring", "kv-all-gather", "head-all-to-all"] {
        let none = bytes(exchange, "none", "megatron-core");
        let selective = bytes(exchange, "selective", "megatron-core");
        let full = bytes(exchange, "full", "megatron-core");
        assert!(selective > none * 1.2, "{exchange}: {selective} vs {none}");
        assert!(
            (selective - full).abs() < 1e-6 * full,
            "{exchange}: {selective} vs {full}"
        );
    }
    let none = bytes("torch-all-gather", "none", "torchtitan");
    let selective = bytes("torch-all-gather", "selective", "torchtitan");
    assert!(
        (selective - none).abs() < 1e-6 * none,
        "{selective} vs {none}"
    );
}
