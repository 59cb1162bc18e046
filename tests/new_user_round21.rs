//! Regressions from the twenty-first review of valid usage by a new user: an ML infrastructure
//! engineer about to bet a month of cluster time plans DeepSeek-V3 on 256 H100 nodes and
//! Qwen3-235B on GB200 NVL72, Llama 3 70B at 128K tokens with context parallelism, a DeepSpeed
//! ZeRO-3 run against Megatron-Core, emits the launch lines and renders `report`'s figures (each
//! test names the finding).

mod common;
use common::{ROOT, run};

fn stdout_of(args: &[&str]) -> String {
    let r = run(args);
    assert_eq!(r.code, 0, "{args:?}: {}", r.stderr);
    r.stdout
}

/// The header's `training:` line.
fn training_line(out: &str) -> &str {
    out.lines()
        .find(|l| l.starts_with("training:"))
        .unwrap_or_else(|| panic!("no training line in:\n{out}"))
}

/// An MoE plan was priced with perfectly balanced routing (`--moe-imbalance` defaults to 1, as
/// the published MoE benchmarks force with `--moe-router-force-load-balancing`), but neither
/// `plan` nor `eval` said so: the header named the dispatcher and nothing about the load, and the
/// `--emit megatron` line (rightly) does not force balance, so the run it launches routes as its
/// router does while tpsim's 3.51 s assumed every expert the same share. The header of an MoE
/// model now says the step is priced balanced and how to price a busier expert; a dense model's
/// header says nothing of routing, and a given imbalance is named as before.
#[test]
fn an_moe_header_says_the_step_is_priced_with_balanced_routing() {
    let moe = [
        "--model",
        "deepseek-v3",
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        "256",
        "--global-batch",
        "1536",
    ];
    let plan = stdout_of(&[&["plan", "--top", "1"][..], &moe].concat());
    let line = training_line(&plan);
    assert!(
        line.contains("MoE routing: balanced") && line.contains("--moe-imbalance F"),
        "{line}"
    );
    let eval = stdout_of(
        &[
            &["eval"][..],
            &moe,
            &["--tp", "8", "--dp", "256", "--ep", "64", "--etp", "1"],
            &[
                "--micro-batch",
                "6",
                "--sequence-parallel",
                "--recompute",
                "selective",
            ],
            &["--zero", "2"],
        ]
        .concat(),
    );
    assert!(
        training_line(&eval).contains("MoE routing: balanced"),
        "{eval}"
    );
    let busier = stdout_of(&[&["plan", "--top", "1", "--moe-imbalance", "1.2"][..], &moe].concat());
    let line = training_line(&busier);
    assert!(
        line.contains("the busiest expert gets 1.2 x the balanced load")
            && !line.contains("balanced, every expert"),
        "{line}"
    );
    let dense = stdout_of(&["plan", "--model", "llama3-8b", "--nodes", "1", "--top", "1"]);
    assert!(!training_line(&dense).contains("MoE routing"), "{dense}");
    // The README's flag list says what F is and that the default is balanced.
    let readme = std::fs::read_to_string(format!("{ROOT}/README.md")).unwrap();
    let flag = readme
        .find("`--moe-imbalance F`")
        .expect("README names --moe-imbalance");
    let said = &readme[flag..flag + 400];
    assert!(
        said.contains("busiest expert") && said.contains("balanced"),
        "{said}"
    );
}

/// Text with its line wrapping undone: words joined by single spaces.
fn words(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `eval`'s plan line reads "experts: ep 64 x etp 1 x expert-dp 32" and "why the best plan"
/// reads "DP 256 (experts over expert-DP 32, on network)", but neither `plan --help`, `eval
/// --help` nor the README's "What the output means" said what expert-DP is or how it follows
/// from the other degrees (nor what `ep` does beyond its name), and `plan --help` said MFU is
/// "model FLOPs over the bf16 peak" without the README's "of the active parameters", which
/// for DeepSeek-V3 is 37.6B of 671B. Each now defines expert-DP as tp x cp x dp / (ep x etp),
/// checked here against the value `eval` prints.
#[test]
fn expert_dp_and_moe_mfu_are_defined_where_the_columns_are() {
    let eval = stdout_of(&[
        "eval",
        "--model",
        "deepseek-v3",
        "--gpu",
        "h100-sxm-80g",
        "--nodes",
        "256",
        "--global-batch",
        "1536",
        "--tp",
        "8",
        "--dp",
        "256",
        "--ep",
        "64",
        "--etp",
        "1",
        "--micro-batch",
        "6",
        "--sequence-parallel",
        "--recompute",
        "selective",
        "--zero",
        "2",
    ]);
    // The definition holds for the numbers eval prints: 8 x 1 x 256 / (64 x 1) = 32.
    assert!(
        eval.contains("experts: ep 64 x etp 1 x expert-dp 32"),
        "{eval}"
    );
    let plan_help = words(&stdout_of(&["plan", "--help"]));
    let columns = plan_help
        .split("The table's columns:")
        .nth(1)
        .and_then(|rest| rest.split("Examples:").next())
        .expect("plan --help has its column glossary");
    assert!(
        columns.contains("expert-DP") && columns.contains("tp x cp x dp / (ep x etp)"),
        "{columns}"
    );
    assert!(columns.contains("active parameters"), "{columns}");
    let eval_help = words(&stdout_of(&["eval", "--help"]));
    let terms = eval_help
        .split("Terms:")
        .nth(1)
        .and_then(|rest| rest.split("Examples:").next())
        .expect("eval --help has its terms");
    assert!(
        terms.contains("expert-dp the copies of each expert, tp x cp x dp / (ep x etp)"),
        "{terms}"
    );
    let readme = words(&std::fs::read_to_string(format!("{ROOT}/README.md")).unwrap());
    let meaning = readme
        .split("**What the output means.**")
        .nth(1)
        .and_then(|rest| rest.split("## Commands").next())
        .expect("README has 'What the output means'");
    assert!(
        meaning.contains("expert-DP") && meaning.contains("tp × cp × dp / (ep × etp)"),
        "{meaning}"
    );
}
