//! Regressions from the twenty-fourth review of valid usage by a new user: an ML infrastructure
//! engineer about to bet a month of cluster time follows the README's first screen, then a
//! long-context team plans Llama 3 70B at 128K and 1M tokens on 32 H100 nodes (context
//! parallelism, `--emit megatron`), an MoE team plans DeepSeek-V3 on 256 nodes of H800, a team
//! weighs GB200 NVL72 against B200 with `sweep --axis gpu`, a user runs every example of
//! `plan --help` and `eval --help` as written, and a user with a budget reads days and dollars in
//! `plan`, `eval` and `sweep` (each test names the finding).

mod common;
use common::{ROOT, run, run_in, scratch};
use std::path::Path;

fn stdout_of(args: &[&str]) -> String {
    let r = run(args);
    assert_eq!(r.code, 0, "{args:?}: {}", r.stderr);
    r.stdout
}

/// The example command lines under `Examples:` in a subcommand's `--help`, as a user pastes
/// them: wrapped lines joined, `# ...` comments and comment lines dropped, a `> FILE` redirect
/// cut off (the shell's, not tpsim's).
fn help_examples(subcommand: &str) -> Vec<Vec<String>> {
    let help = stdout_of(&[subcommand, "--help"]);
    let examples = help
        .split("Examples:")
        .nth(1)
        .unwrap_or_else(|| panic!("no Examples: in `tpsim {subcommand} --help`"));
    // The help wraps long lines at the terminal's width: a line that starts neither an example
    // nor a comment continues the line above it (an example, or a comment, dropped).
    let mut lines: Vec<String> = Vec::new();
    let mut in_comment = false;
    for line in examples.lines().map(str::trim) {
        if line.is_empty() {
            if lines.is_empty() {
                continue;
            }
            break;
        }
        if line.starts_with("tpsim ") {
            lines.push(line.to_string());
            in_comment = false;
        } else if line.starts_with('#') {
            in_comment = true;
        } else if in_comment {
            continue;
        } else if let Some(last) = lines.last_mut() {
            last.push(' ');
            last.push_str(line);
        }
    }
    lines
        .iter()
        .map(|l| {
            let command = l.split('#').next().unwrap();
            let command = command.split('>').next().unwrap();
            command["tpsim ".len()..]
                .split_whitespace()
                .map(str::to_string)
                .collect()
        })
        .collect()
}

/// Runs every example of `tpsim SUBCOMMAND --help` from the repository root (a `--save` path
/// moved to a scratch folder, so the run writes nothing into the repository) and asserts each
/// exits 0.
fn every_example_runs(subcommand: &str) {
    let examples = help_examples(subcommand);
    assert!(examples.len() >= 4, "{examples:?}");
    let dir = scratch("new-user-round24", &format!("{subcommand}-examples"));
    for example in &examples {
        let mut args: Vec<String> = example.clone();
        if let Some(i) = args.iter().position(|a| a == "--save") {
            args[i + 1] = dir.join("saved.yaml").display().to_string();
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_eq!(args[0], subcommand, "{args:?}");
        let r = run_in(Path::new(ROOT), &args);
        assert_eq!(
            r.code,
            0,
            "`tpsim {}` (an example of `tpsim {subcommand} --help`) failed: {}{}",
            args.join(" "),
            r.stderr,
            r.stdout
                .lines()
                .filter(|l| l.contains("DOES NOT FIT"))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}

/// `tpsim eval --help` showed `tpsim eval --layers 96 --hidden 12288 --heads 96 --nodes 64 --tp 8
/// --pp 8 --format json` as an example, and as written it evaluates a plan that does not fit
/// (80.2 of 79.7 GiB: Megatron-LM's defaults, no sequence parallelism and ZeRO-0) and exits 1.
/// The example now gives --sequence-parallel --zero 1, as `plan` would run it, and every example
/// of `eval --help` and `plan --help` (the `--emit deepspeed > ds_config.json` one without its
/// shell redirect) exits 0.
#[test]
fn every_plan_and_eval_help_example_runs_as_written() {
    every_example_runs("plan");
    every_example_runs("eval");
}

fn why_line(stdout: &str, prefix: &str) -> String {
    stdout
        .lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no `{prefix}` line in:\n{stdout}"))
        .to_string()
}

const LONG_CONTEXT: [&str; 10] = [
    "plan",
    "--model",
    "llama3-70b",
    "--nodes",
    "32",
    "--seq-len",
    "131072",
    "--global-batch",
    "128",
    "--top=1",
];

/// Llama 3 70B at 128K tokens on 32 H100 nodes: "why the best plan" said CP 8 "exchanges its keys
/// and values among the context-parallel ranks", without naming the ring or what hides it (eval's
/// CP line did: "Transformer Engine's K/V ring (cp − 1 point-to-point steps)", "hidden by the
/// attention blocks of each ring step"). It now names the ring, its --cp-comm-type and the seconds
/// the attention hides, the same numbers as `eval`'s CP comm line.
#[test]
fn why_the_best_plan_names_the_cp_ring_and_what_hides_it() {
    let out = stdout_of(&LONG_CONTEXT);
    let line = why_line(&out, "  CP 8:");
    assert!(
        line.contains("around the ring")
            && line.contains("--cp-comm-type p2p")
            && line.contains("hidden by the attention blocks of each ring step"),
        "{line}"
    );
    // The hidden and total seconds are eval's, for the same plan.
    let eval = stdout_of(&[
        "eval",
        "--model",
        "llama3-70b",
        "--nodes",
        "32",
        "--seq-len",
        "131072",
        "--global-batch",
        "128",
        "--tp",
        "8",
        "--cp",
        "8",
        "--pp",
        "2",
        "--vpp",
        "10",
        "--mb",
        "1",
        "--sp",
        "--zero",
        "1",
    ]);
    let cp_comm = why_line(&eval, "  CP comm");
    // "  CP comm   1.480 s   1.1%  of 9.864 s; 8.384 s hidden by ..."
    let total: f64 = cp_comm.split("of ").nth(1).unwrap()[..5].parse().unwrap();
    let hidden: f64 = cp_comm.split("; ").nth(1).unwrap()[..5].parse().unwrap();
    assert!(
        line.contains(&format!("{hidden:.2} of its {total:.2} s hidden")),
        "{line}\n{cp_comm}"
    );
}

/// Under `--cp-exchange head-all-to-all` (Megatron-Core's --cp-comm-type a2a) the CP line still
/// said "exchanges its keys and values", the ring's words, for an exchange that trades Q, K, V and
/// the output between sequence and head shards, all of it exposed; and under kv-all-gather it did
/// not say that nothing hides the gathers.
#[test]
fn why_the_best_plan_names_the_cp_exchange_it_runs() {
    let mut args = LONG_CONTEXT.to_vec();
    args[2] = "llama3-8b";
    args[4] = "1";
    args[6] = "65536";
    args[8] = "16";
    args.extend(["--cp", "8", "--tp", "1", "--cp-exchange", "head-all-to-all"]);
    let line = why_line(&stdout_of(&args), "  CP 8:");
    assert!(
        line.contains("trades Q, K, V and the attention output")
            && line.contains("a2a")
            && line.contains("nothing hides its")
            && !line.contains("keys and values"),
        "{line}"
    );
    let n = args.len();
    args[n - 1] = "kv-all-gather";
    let line = why_line(&stdout_of(&args), "  CP 8:");
    assert!(
        line.contains("all-gathers its keys and values") && line.contains("nothing hides its"),
        "{line}"
    );
}

/// DeepSeek-V3 on 256 nodes of H800: "why the best plan" said what EP 128 costs (the all-to-alls)
/// but not what it buys; it now says how many of each MoE layer's routed experts one GPU holds.
#[test]
fn why_the_best_plan_says_what_ep_buys() {
    let out = stdout_of(&[
        "plan",
        "--model",
        "deepseek-v3",
        "--gpu",
        "h800-sxm-80g",
        "--nodes",
        "256",
        "--top=1",
    ]);
    let line = why_line(&out, "  EP ");
    let ep: u32 = line["  EP ".len()..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        line.contains(&format!(
            "each GPU holds {} of each MoE layer's 256 routed experts",
            256 / ep
        )),
        "{line}"
    );
}

/// `plan --help` said --global-batch defaults to 1536, "GPT-3's batch": GPT-3's batch was 3.1M
/// tokens, and at --seq-len 131072 the default is 201M tokens per step (the stderr note said so,
/// the help did not). The help now says the 1536 are sequences, 3.1M tokens only at 2048 each;
/// since leftovers round 39 the default keeps those 3.1M tokens at any --seq-len, and the help
/// says so with the sequences at 2048 and at 131072.
#[test]
fn global_batch_help_says_the_default_is_sequences_not_gpt3_tokens() {
    let help = stdout_of(&["plan", "--help"]);
    let at = help
        .find("--global-batch <")
        .expect("--global-batch in plan --help");
    let text: String = help[at..]
        .lines()
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .map(str::trim)
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        text.contains("3.1M tokens per step")
            && text.contains("1536 sequences at its 2048 tokens")
            && text.contains("--seq-len")
            && !text.contains("GPT-3's batch"),
        "{text}"
    );
}

/// DeepSeek-V3 on 256 nodes of H800: `eval`'s throughput line printed "model TFLOP/s per GPU
/// (MFU 14.7%)" with nothing saying those FLOPs count the 37.6B active parameters, not the 671B
/// (the README says so, the output did not). It now names the active parameters for an MoE model,
/// and nothing for a dense one.
#[test]
fn eval_throughput_says_mfu_counts_the_active_parameters() {
    let out = stdout_of(&[
        "eval",
        "--model",
        "deepseek-v3",
        "--gpu",
        "h800-sxm-80g",
        "--nodes",
        "256",
        "--global-batch",
        "1536",
        "--tp",
        "4",
        "--ep",
        "128",
        "--etp",
        "1",
        "--sp",
        "--zero",
        "2",
        "--mb",
        "3",
        "--recompute",
        "selective",
    ]);
    let line = why_line(&out, "throughput:");
    assert!(
        line.contains("model TFLOP/s per GPU of the 37.6B active parameters (MFU"),
        "{line}"
    );
    let dense = stdout_of(&["eval", "--plan", "plans/seed-512b-32nodes.yaml"]);
    let line = why_line(&dense, "throughput:");
    assert!(!line.contains("active"), "{line}");
}

/// The README introduced its DeepSeek-V3 example as "DeepSeek-V3 on 2,048 H100 (as DeepSeek
/// trained", but DeepSeek trained it on 2,048 H800 (DeepSeek-V3 Technical Report, arXiv
/// 2412.19437, §3.1: "a cluster equipped with 2048 NVIDIA H800 GPUs"), whose NVLink is cut to
/// 400 GB/s: an MoE team on H800 read the H100 example as their cluster. The paragraph now names
/// the H800 and the profile that plans it.
#[test]
fn readme_says_deepseek_trained_on_h800_not_h100() {
    let readme = std::fs::read_to_string(Path::new(ROOT).join("README.md")).unwrap();
    let at = readme
        .find("DeepSeek-V3 on 2,048 H100")
        .expect("the README's DeepSeek-V3 example");
    let paragraph = &readme[at..at + readme[at..].find("\n\n").unwrap()];
    assert!(!paragraph.contains("(as DeepSeek trained"), "{paragraph}");
    assert!(
        paragraph.contains("2,048 H800") && paragraph.contains("--gpu h800-sxm-80g"),
        "{paragraph}"
    );
    // The profile it names exists and is the export part.
    let profile =
        std::fs::read_to_string(Path::new(ROOT).join("clusters/h800-sxm-80g.yaml")).unwrap();
    assert!(profile.contains("nvlink_gb_per_s: 200"), "{profile}");
}
