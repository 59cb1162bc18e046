//! The README's examples, run: every command the README shows together with its output is run with
//! the release binary and its output compared with the README's block, so a change that alters an
//! output fails here until the README says the same.
//!
//! Which blocks are checked:
//! - a ```` ```sh ```` block directly followed by a plain ```` ``` ```` block: the commands run in
//!   order (lines writing under `~` or starting with `cargo test` are install or meta steps and are
//!   skipped) and the last one's output, stdout and stderr as they interleave, is the block;
//! - a plain block directly after a line `<!-- output of: COMMAND -->`.
//!
//! `tpsim` is the binary under test (it is put first on `PATH`, so `$(tpsim ...)` and pipes work);
//! `cargo run --release --` in a command means `tpsim`. Commands run in a scratch directory holding
//! copies of `plans/`, `models/`, `examples/`, `clusters/` and an empty `reports/`, so files they
//! write never touch the checkout. Search timings ("— 16.7 ms on 2 threads", "in 50.3 ms") vary and
//! are compared as `<time>`. A line `...` (or `│  ...`) in a block stands for one or more lines: the
//! lines above it must be the output's first lines and the lines below it its last ones.
//!
//! After a change that is meant to alter outputs, regenerate every checked block with
//!
//! ```sh
//! TPSIM_BLESS=1 cargo test --release --test readme
//! ```
//!
//! and read the README diff before committing it (blessed blocks keep their `...` lines and the
//! same number of lines above and below them).

use std::path::{Path, PathBuf};
use std::process::Command;

/// One checked block: the commands and the README lines (0-based, exclusive fences) of its output.
struct Example {
    commands: Vec<String>,
    body_start: usize,
    body_end: usize,
}

fn is_fence(line: &str) -> bool {
    line.trim_start().starts_with("```")
}

fn is_plain_fence(line: &str) -> bool {
    line.trim() == "```"
}

/// The index of the closing fence of the block whose opening fence is at `open`.
fn closing_fence(lines: &[&str], open: usize) -> usize {
    (open + 1..lines.len())
        .find(|&i| is_fence(lines[i]))
        .unwrap_or_else(|| panic!("README line {}: unclosed code block", open + 1))
}

fn examples(readme: &str) -> Vec<Example> {
    let lines: Vec<&str> = readme.lines().collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if !is_fence(lines[i]) {
            if let Some(command) = lines[i]
                .trim()
                .strip_prefix("<!-- output of:")
                .and_then(|rest| rest.strip_suffix("-->"))
            {
                let open = i + 1;
                assert!(
                    open < lines.len() && is_plain_fence(lines[open]),
                    "README line {}: `<!-- output of: -->` must sit directly above a plain ``` block",
                    i + 1
                );
                let close = closing_fence(&lines, open);
                found.push(Example {
                    commands: vec![command.trim().to_string()],
                    body_start: open + 1,
                    body_end: close,
                });
                i = close + 1;
                continue;
            }
            i += 1;
            continue;
        }
        let close = closing_fence(&lines, i);
        let opens_sh = lines[i].trim() == "```sh";
        let output_open = close + 1;
        if opens_sh && output_open < lines.len() && is_plain_fence(lines[output_open]) {
            let output_close = closing_fence(&lines, output_open);
            let commands = lines[i + 1..close]
                .iter()
                .map(|l| l.trim())
                .filter(|l| !l.is_empty() && !l.contains('~') && !l.starts_with("cargo test"))
                .map(str::to_string)
                .collect();
            found.push(Example {
                commands,
                body_start: output_open + 1,
                body_end: output_close,
            });
            i = output_close + 1;
        } else {
            i = close + 1;
        }
    }
    found
}

/// Replaces run-to-run timings with `<time>`: the search line's "— 16.7 ms on 2 threads" and
/// the sweep's "searched in 50.3 ms".
fn normalize(line: &str) -> String {
    let mut line = line.trim_end().to_string();
    if let Some(start) = line.find(" — ")
        && line[start..].contains(" thread")
    {
        let tail = &line[start + " — ".len()..];
        let is_timing = tail
            .split_whitespace()
            .next()
            .is_some_and(|n| n.parse::<f64>().is_ok());
        if is_timing {
            line = format!("{} — <time>", &line[..start]);
        }
    }
    if let Some(start) = line.find(" searched in ") {
        let after = start + " searched in ".len();
        if let Some(end) = line[after..].find(" ms)") {
            line = format!(
                "{}<time>{}",
                &line[..after],
                &line[after + end + " ms".len()..]
            );
        }
    }
    line
}

fn is_elision(line: &str) -> bool {
    line.trim().trim_start_matches('│').trim() == "..."
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create scratch directory");
    for entry in std::fs::read_dir(from).expect("read input directory") {
        let entry = entry.expect("directory entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("file type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy input file");
        }
    }
}

/// A scratch directory with the inputs the README's commands read.
fn scratch() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = std::env::temp_dir().join(format!("tpsim-readme-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for input in ["plans", "models", "examples", "clusters", "validation"] {
        copy_dir(&root.join(input), &dir.join(input));
    }
    std::fs::create_dir_all(dir.join("reports")).expect("create scratch reports/");
    dir
}

/// Runs one README command line with `sh` in `dir`; returns what it printed (stdout and stderr
/// as they interleave), normalised.
fn run(command: &str, dir: &Path) -> Vec<String> {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_tpsim"));
    let path = format!(
        "{}:{}",
        bin.parent().expect("binary directory").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let command = command.replace("cargo run --release --", "tpsim");
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("{{ {command}\n}} 2>&1"))
        .current_dir(dir)
        .env("PATH", path)
        .env_remove("COLUMNS")
        .output()
        .unwrap_or_else(|e| panic!("{command}: cannot start sh: {e}"));
    let text = String::from_utf8(out.stdout).expect("output is UTF-8");
    // A README example that cannot find its input shows an error, not what tpsim does.
    assert!(
        !text.contains("No such file or directory"),
        "{command}: an input is missing from the scratch directory:\n{text}"
    );
    let mut lines: Vec<String> = text.lines().map(normalize).collect();
    while lines.last().is_some_and(|l| l.is_empty()) {
        lines.pop();
    }
    lines
}

/// What the README block should read, given the command's output: the output itself, or, where the
/// block elides, as many first and last lines as the block shows around its `...` line.
fn expected_block(shown: &[&str], output: &[String]) -> Vec<String> {
    let elisions: Vec<usize> = (0..shown.len()).filter(|&i| is_elision(shown[i])).collect();
    match elisions.as_slice() {
        [] => output.to_vec(),
        [at] => {
            let head = *at;
            let tail = shown.len() - at - 1;
            if head + tail >= output.len() {
                return output.to_vec();
            }
            let mut block = output[..head].to_vec();
            block.push(shown[*at].to_string());
            block.extend_from_slice(&output[output.len() - tail..]);
            block
        }
        _ => panic!("a README block may elide once (one `...` line); this one has {elisions:?}"),
    }
}

#[test]
fn every_readme_example_prints_what_the_readme_shows() {
    let readme_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md");
    let readme = std::fs::read_to_string(&readme_path).expect("README.md is readable");
    let examples = examples(&readme);
    assert!(
        examples.len() >= 8,
        "found only {} checked examples in README.md; the parser lost track of its blocks",
        examples.len()
    );
    let bless = std::env::var_os("TPSIM_BLESS").is_some();
    let dir = scratch();
    let mut lines: Vec<String> = readme.lines().map(str::to_string).collect();
    let mut failures = Vec::new();
    // Blocks are replaced from the last to the first, so earlier line numbers stay valid.
    let mut replacements = Vec::new();
    for example in &examples {
        let mut output = Vec::new();
        for command in &example.commands {
            output = run(command, &dir);
        }
        let shown: Vec<&str> = lines[example.body_start..example.body_end]
            .iter()
            .map(String::as_str)
            .collect();
        let expected = expected_block(&shown, &output);
        let shown_normalized: Vec<String> = shown.iter().map(|l| normalize(l)).collect();
        if shown_normalized != expected {
            let first_difference = shown_normalized
                .iter()
                .zip(&expected)
                .position(|(a, b)| a != b)
                .unwrap_or(shown_normalized.len().min(expected.len()));
            failures.push(format!(
                "README line {}: `{}` now prints\n{}\n  README line {}:\n    {}\n  output:\n    {}",
                example.body_start + 1,
                example.commands.last().map(String::as_str).unwrap_or(""),
                expected.join("\n"),
                example.body_start + 1 + first_difference,
                shown_normalized
                    .get(first_difference)
                    .map(String::as_str)
                    .unwrap_or("(block ends)"),
                expected
                    .get(first_difference)
                    .map(String::as_str)
                    .unwrap_or("(output ends)"),
            ));
            // Keep the README's own timings when blessing; only the normalised text changed.
            let blessed: Vec<String> = expected
                .iter()
                .map(
                    |line| match shown.iter().find(|old| normalize(old) == *line) {
                        Some(old) => old.to_string(),
                        None => line.clone(),
                    },
                )
                .collect();
            replacements.push((example.body_start, example.body_end, blessed));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    if bless {
        for (start, end, blessed) in replacements.into_iter().rev() {
            lines.splice(start..end, blessed);
        }
        let mut text = lines.join("\n");
        text.push('\n');
        std::fs::write(&readme_path, text).expect("README.md is writable");
        return;
    }
    assert!(
        failures.is_empty(),
        "{} README example(s) drifted (regenerate with `TPSIM_BLESS=1 cargo test --release --test readme`, then read the diff):\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

#[test]
fn normalize_hides_timings_only() {
    assert_eq!(
        normalize("search: 5136 candidates, 129 feasible — 16.7 ms on 2 threads"),
        "search: 5136 candidates, 129 feasible — <time>"
    );
    assert_eq!(
        normalize(
            "sweep over nodes: best plan at each of 4 points (26128 candidates searched in 50.3 ms)"
        ),
        "sweep over nodes: best plan at each of 4 points (26128 candidates searched in <time>)"
    );
    assert_eq!(
        normalize("TP 8 — inside one node"),
        "TP 8 — inside one node"
    );
}

#[test]
fn an_elided_block_keeps_its_head_and_tail() {
    let output: Vec<String> = ["a", "b", "c", "d", "e"].map(String::from).to_vec();
    assert_eq!(
        expected_block(&["a", "...", "e"], &output),
        ["a", "...", "e"]
    );
    assert_eq!(
        expected_block(&["x", "│  ...", "y", "z"], &output),
        ["a", "│  ...", "d", "e"]
    );
    assert_eq!(expected_block(&["x"], &output), output);
}
