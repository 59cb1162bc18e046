//! Regressions from the 27th review of valid usage by a new user: an ML infrastructure engineer
//! who saves a plan, keeps the file, and evaluates it again later (each test names the finding
//! it guards).

mod common;
use common::{run_in, scratch};

/// `text` without the top-level `framework:`, `attention:` and `overlap:` keys (the overlap's
/// indented mapping with it): a plan file as `plan --save` wrote it before those keys existed.
fn as_saved_before_the_keys(text: &str) -> String {
    let mut kept = Vec::new();
    let mut in_overlap = false;
    for line in text.lines() {
        if in_overlap && line.starts_with(' ') {
            continue;
        }
        in_overlap = line.starts_with("overlap:");
        if in_overlap || line.starts_with("framework:") || line.starts_with("attention:") {
            continue;
        }
        kept.push(line);
    }
    kept.join("\n") + "\n"
}

/// Finding: a plan file saved before `framework:`, `overlap:` or `attention:` existed loaded with
/// today's defaults for them with no note, so a plan made without TP comm overlap and with unfused
/// attention was evaluated with both as today's defaults (overlap on, FlashAttention) without a
/// word. Each missing key
/// is now said in one line naming the key and the value taken; the file as saved today, and a
/// hand-written one (whose defaults are documented), get no such note.
#[test]
fn a_plan_saved_before_the_framework_overlap_and_attention_keys_says_what_it_took() {
    let dir = scratch("new_user_round27", "old_saved_plan");
    let saved = run_in(
        &dir,
        &[
            "plan",
            "--model",
            "llama3-8b",
            "--gpu",
            "h100-sxm-80g",
            "--nodes",
            "1",
            "--global-batch",
            "64",
            "--tp-comm-overlap",
            "false",
            "--attention",
            "unfused",
            "--save",
            "new.yaml",
        ],
    );
    assert_eq!(saved.code, 0, "{}", saved.stderr);
    let text = std::fs::read_to_string(dir.join("new.yaml")).unwrap();
    for key in [
        "framework: megatron-core",
        "attention: unfused",
        "tp_comm: false",
    ] {
        assert!(text.contains(key), "plan --save writes {key}: {text}");
    }
    let old = as_saved_before_the_keys(&text);
    assert!(
        !old.contains("framework:") && !old.contains("overlap:") && !old.contains("attention:")
    );
    std::fs::write(dir.join("old.yaml"), &old).unwrap();

    for command in ["eval", "compare"] {
        let args: Vec<&str> = match command {
            "eval" => vec!["eval", "--plan", "old.yaml"],
            _ => vec!["compare", "--plan", "old.yaml", "--plan", "old.yaml"],
        };
        let r = run_in(&dir, &args);
        assert_eq!(r.code, 0, "{command}: {}", r.stderr);
        let notes: Vec<&str> = r
            .stderr
            .lines()
            .filter(|l| l.contains("was saved before plan files kept"))
            .collect();
        assert_eq!(
            notes.len(),
            3,
            "{command}: one note per missing key: {}",
            r.stderr
        );
        for (key, value) in [
            ("framework", "framework: megatron-core"),
            (
                "overlap",
                "overlap: {tp_comm: true, grad_reduce: true, param_gather: true, p2p: true, moe_a2a: false}",
            ),
            ("attention", "attention: flash"),
        ] {
            let line = notes
                .iter()
                .find(|l| l.contains(&format!("kept {key}:")))
                .unwrap_or_else(|| panic!("{command}: no note for {key}: {}", r.stderr));
            assert!(line.starts_with("note: old.yaml "), "{line}");
            assert!(
                line.contains(value),
                "{command}: {key} names the value taken: {line}"
            );
        }
        // What the notes say is what ran: the training line of eval names the same defaults.
        if command == "eval" {
            let training = r
                .stdout
                .lines()
                .find(|l| l.starts_with("training:"))
                .unwrap();
            assert!(
                training.contains("flash attention") && training.contains("megatron-core"),
                "{training}"
            );
        }
    }

    // A flag given in its place is what the user asked: nothing assumed, nothing said for it.
    let flags = run_in(
        &dir,
        &[
            "eval",
            "--plan",
            "old.yaml",
            "--framework",
            "megatron-core",
            "--attention",
            "unfused",
        ],
    );
    assert_eq!(flags.code, 0, "{}", flags.stderr);
    assert!(
        !flags.stderr.contains("was saved before"),
        "{}",
        flags.stderr
    );

    // The file as saved today states all three, and a hand-written file (no `# Written by`
    // line) takes the documented defaults: no note for either.
    let hand_written: String = old
        .lines()
        .filter(|l| !l.starts_with("# Written by"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(dir.join("hand.yaml"), hand_written).unwrap();
    for file in ["new.yaml", "hand.yaml"] {
        let r = run_in(&dir, &["eval", "--plan", file]);
        assert_eq!(r.code, 0, "{file}: {}", r.stderr);
        assert!(
            !r.stderr.contains("was saved before"),
            "{file}: {}",
            r.stderr
        );
    }
}
