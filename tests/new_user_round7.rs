//! Regressions from the seventh review of valid usage by a new user: an ML infrastructure engineer
//! who plans Llama 3 70B/405B, DeepSeek-V3 and Qwen3-235B on H100, B200 and GB200 NVL72, copies
//! the winning row into `eval`, compares the top two, renders the report and looks at its figures,
//! tries torchtitan's ZB-V schedule, and reads `--help` (each test names the finding it guards).

mod common;
use common::{json, run, scratch};
use serde_json::Value;

/// The README with its line breaks and runs of spaces read as one space.
fn readme_flat() -> String {
    std::fs::read_to_string(format!("{}/README.md", common::ROOT))
        .unwrap()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// The text right after `before` in `text`, up to the first character not in a number.
fn number_after<'a>(text: &'a str, before: &str) -> &'a str {
    let at = text
        .find(before)
        .unwrap_or_else(|| panic!("no {before:?} in {text}"))
        + before.len();
    let len = text[at..]
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len() - at);
    &text[at..at + len]
}

/// `(fill, x, width)` of every `<rect>` in an SVG.
fn rects(svg: &str) -> Vec<(String, f64, f64)> {
    let attr = |element: &str, name: &str| -> Option<String> {
        let key = format!(" {name}=\"");
        let at = element.find(&key)? + key.len();
        Some(element[at..at + element[at..].find('"')?].to_string())
    };
    svg.split("<rect")
        .skip(1)
        .map(|tail| &tail[..tail.find('>').unwrap()])
        .filter_map(|e| {
            Some((
                attr(e, "fill")?,
                attr(e, "x")?.parse().ok()?,
                attr(e, "width")?.parse().ok()?,
            ))
        })
        .collect()
}

fn hex(c: plotters::style::RGBColor) -> String {
    format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2)
}

/// The best plan of the README's Hugging Face example, on 64 H100 nodes at 8K tokens: TP 8 × PP 2
/// with 20 interleaved chunks and 16 micro-batches, 640 blocks a stage.
const LLAMA_70B_ROW: [&str; 21] = [
    "eval",
    "--model",
    "llama3-70b",
    "--nodes",
    "64",
    "--seq-len",
    "8192",
    "--global-batch",
    "1024",
    "--tp",
    "8",
    "--pp",
    "2",
    "--vpp",
    "20",
    "--micro-batch",
    "2",
    "--sequence-parallel",
    "--zero",
    "1",
    "--report",
];

/// The report's timeline of Llama 3 70B's best plan on 512 H100s (1,280 blocks, under the
/// 3,000 that fold the step) drew all of them on one 966-pixel axis: 721 of its rectangles had
/// width 0 and the rest 1, so the rows read as an idle pipeline beside "bubble 0.3%", and the
/// exposed-TP strips the legend keys ("4.7% of each block") were never drawn. A step whose
/// blocks would be narrower than 3 pixels is now folded like a long one, and each strip is at
/// least a pixel wide.
#[test]
fn timeline_blocks_and_strips_are_wide_enough_to_see() {
    let dir = scratch("new-user-7", "timeline");
    let out = dir.join("r");
    let mut args = LLAMA_70B_ROW.to_vec();
    args.push(out.to_str().unwrap());
    let r = run(&args);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let svg = std::fs::read_to_string(out.join("timeline.svg")).unwrap();
    use tpsim::cost::schedule::Direction::{Backward, Forward};
    let block_fills: Vec<String> = (0..4)
        .flat_map(|c| {
            [
                hex(tpsim::report::block_colour(Forward, c)),
                hex(tpsim::report::block_colour(Backward, c)),
            ]
        })
        .collect();
    let all = rects(&svg);
    let blocks: Vec<&(String, f64, f64)> = all
        .iter()
        .filter(|(fill, _, _)| block_fills.contains(fill))
        .collect();
    assert!(blocks.len() > 100, "{} blocks drawn", blocks.len());
    let thin: Vec<_> = blocks.iter().filter(|(_, _, w)| *w < 2.0).collect();
    // A block cut at a panel's edge may be thin; none other.
    assert!(
        thin.len() <= 4,
        "{} of {} blocks under 2 pixels wide: {:?}",
        thin.len(),
        blocks.len(),
        &thin[..thin.len().min(8)]
    );
    assert!(
        svg.contains("is folded"),
        "the 640-block stages are not folded"
    );
    let strips: Vec<_> = all
        .iter()
        .filter(|(fill, _, _)| fill == "#333333")
        .collect();
    assert!(!strips.is_empty(), "no exposed-TP strip drawn");
    assert!(
        strips.iter().all(|(_, _, w)| *w >= 1.0),
        "TP strips of width 0: {}",
        strips.iter().filter(|(_, _, w)| *w < 1.0).count()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--help` said `--recompute-modules` defaults to "core_attn", while `plan` and `eval` of
/// DeepSeek-V3 under Megatron-Core recompute "moe_act, layernorm, mla_up_proj" (as the README and
/// the training line say); and that `--overlap-grad-reduce` defaults to "the framework's (on)",
/// while `--framework megatron-lm-2021` overlaps no communication at all.
#[test]
fn help_gives_the_defaults_the_commands_use() {
    let help = run(&["plan", "--help"]);
    assert_eq!(help.code, 0);
    // A flag's help: its line and those under it, up to the next flag's, as one line.
    let paragraph = |flag: &str| -> String {
        let lines: Vec<&str> = help.stdout.lines().collect();
        let at = lines
            .iter()
            .position(|l| l.trim_start().starts_with(&format!("{flag} ")))
            .unwrap_or_else(|| panic!("no {flag} in the help"));
        lines[at + 1..]
            .iter()
            // The next flag's line is indented 6 (or `  -h`), its help 10.
            .take_while(|l| !(l.starts_with("      -") || l.starts_with("  -")))
            .flat_map(|l| l.split_whitespace())
            .collect::<Vec<_>>()
            .join(" ")
    };
    let modules = paragraph("--recompute-modules");
    let header = run(&[
        "plan",
        "--model",
        "deepseek-v3",
        "--gpu",
        "gb200-nvl72",
        "--nodes",
        "64",
        "--global-batch",
        "4096",
        "--top",
        "1",
    ]);
    assert_eq!(header.code, 0, "{}", header.stderr);
    let training = header
        .stdout
        .lines()
        .find(|l| l.starts_with("training:"))
        .unwrap();
    let used = training
        .split("recompute selective = Megatron-Core modules ")
        .nth(1)
        .unwrap_or_else(|| panic!("{training}"));
    let used = &used[..used.find(';').unwrap()];
    assert!(
        !modules.contains("Default: core_attn."),
        "the help's default is not what plan uses ({used}): {modules}"
    );
    let default = &modules[modules.find("Default:").expect("a default")..];
    for module in used.split(", ") {
        assert!(
            default.contains(module),
            "{module} not in the help's default: {default}"
        );
    }

    let grad = paragraph("--overlap-grad-reduce");
    let old = run(&[
        "plan",
        "--params",
        "7B",
        "--nodes",
        "2",
        "--global-batch",
        "64",
        "--framework",
        "megatron-lm-2021",
        "--top",
        "1",
    ]);
    assert_eq!(old.code, 0, "{}", old.stderr);
    assert!(
        old.stdout.contains("(no communication overlapped)"),
        "{}",
        old.stdout
    );
    assert!(
        grad.contains("megatron-lm-2021"),
        "the help says grad reduce overlap is on by default, megatron-lm-2021 runs it off: {grad}"
    );
}

/// DeepSeek-V3 on 256 GB200: the note under the table said "#1 spends 15% of its step in exposed
/// MoE all-to-alls" and the "why the best plan" EP line below it "14.6% of the step exposed" (the
/// README's DeepSeek-V3 example: 51% and 50.7%). One share, one number.
#[test]
fn the_all_to_all_note_and_the_ep_line_print_one_share() {
    let r = run(&[
        "plan",
        "--model",
        "deepseek-v3",
        "--gpu",
        "gb200-nvl72",
        "--nodes",
        "64",
        "--global-batch",
        "4096",
        "--top",
        "1",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let all = format!("{}{}", r.stdout, r.stderr);
    let note = number_after(&all, "note: #1 spends ");
    let ep_line = all
        .lines()
        .find(|l| l.trim_start().starts_with("EP "))
        .expect("an EP line");
    let at = ep_line.rfind(", ").unwrap() + 2;
    let why = number_after(&ep_line[at..], "");
    assert_eq!(note, why, "note {note}% against the EP line's {why}%");
    assert!(note.contains('.'), "{note}");
}

/// The README's first screen defined `bubble %` as "the share of the step the pipeline sits
/// idle"; `eval` of the same row prints a bubble of 0.3% of the step and "all stages idle 1.58%
/// of their time", two idle shares for what the README calls one. The column is the slowest
/// stage's idle share of the step (`eval`'s bubble line), and the README says so and names the
/// other.
#[test]
fn the_readme_says_whose_idle_time_the_bubble_column_is() {
    let readme = readme_flat();
    assert!(
        !readme.contains("`bubble %` the share of the step the pipeline sits idle;"),
        "the old definition"
    );
    assert!(
        readme.contains("`bubble %` the share of the step the slowest stage sits idle"),
        "no definition of the bubble column"
    );
    assert!(readme.contains("idle share of all stages"));
    // The two numbers the README tells apart, on the README's own example row.
    let mut args = LLAMA_70B_ROW[..LLAMA_70B_ROW.len() - 1].to_vec();
    let r = run(&args);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let bubble_line = r
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with("bubble "))
        .expect("a bubble line");
    let all_stages = number_after(&r.stdout, "all stages idle ");
    args[0] = "plan";
    args.truncate(9);
    args.extend(["--top", "1", "--format", "json"]);
    let row: Value = json(&args)["plans"][0].clone();
    let share = format!("{:.1}%", 100.0 * row["bubble_share"].as_f64().unwrap());
    assert!(
        bubble_line.contains(&share),
        "{bubble_line} against {share}"
    );
    assert_ne!(format!("{all_stages}%"), share);
}

/// Figure 2's caption called the range a "black bar", drawn as an outlined box around the bar's
/// top; and Figure 5's caption said "from the event-driven 1F1B schedule simulation" for a plan
/// with no pipeline, under a figure titled "(no pipeline; ...)".
#[test]
fn report_captions_say_what_the_figures_draw() {
    let dir = scratch("new-user-7", "captions");
    let out = dir.join("r");
    let r = run(&[
        "eval",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--tp",
        "8",
        "--global-batch",
        "16",
        "--report",
        out.to_str().unwrap(),
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let html = std::fs::read_to_string(out.join("index.html")).unwrap();
    let caption = |figure: &str| -> String {
        let at = html
            .find(&format!("<img src=\"{figure}\" alt=\""))
            .unwrap_or_else(|| panic!("no {figure}"));
        let rest = &html[at..];
        let start = rest.find("alt=\"").unwrap() + 5;
        rest[start..start + rest[start..].find('"').unwrap()].to_string()
    };
    let step = caption("step_time.svg");
    assert!(!step.contains("black bar"), "{step}");
    assert!(step.contains("box"), "{step}");
    let svg = std::fs::read_to_string(out.join("step_time.svg")).unwrap();
    assert!(
        rects(&svg).iter().any(|(fill, _, _)| fill == "none"),
        "the range is not an outlined box"
    );
    let timeline = caption("timeline.svg");
    assert!(!timeline.contains("1F1B"), "{timeline}");
    assert!(timeline.contains("no pipeline"), "{timeline}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `plan --pp-schedule zbv`'s "why the best plan" PP line read "(ZB-V ratio the schedule at mean
/// chunks = 0.014 with v=2, m=32)", a closed form's name where 1F1B's has its formula.
#[test]
fn the_v_schedule_bubble_ratio_reads_as_a_sentence() {
    let r = run(&[
        "plan",
        "--model",
        "llama3-8b",
        "--nodes",
        "2",
        "--framework",
        "torchtitan",
        "--pp-schedule",
        "zbv",
        "--pp",
        "4",
        "--global-batch",
        "64",
        "--top",
        "1",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let pp = r
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with("PP 4:"))
        .expect("a PP line");
    assert!(!pp.contains("ratio the schedule"), "{pp}");
    assert!(
        pp.contains("(ZB-V ratio from the schedule at mean chunks = "),
        "{pp}"
    );
}

/// `compare` of DeepSeek-V3's two best plans on 256 GB200 (neither pipelined) printed rows "PP
/// comm 0.000", "bubble 0.000" and "PP traffic 0.00", which `eval` leaves out for either plan
/// ("PP none: pp 1") and `compare` already left out for CP and EP.
#[test]
fn compare_of_two_unpipelined_plans_has_no_pipeline_rows() {
    let r = run(&[
        "compare",
        "--model",
        "llama3-8b",
        "--nodes",
        "1",
        "--global-batch",
        "64",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains(" pp1 "), "{}", r.stdout);
    assert!(
        !r.stdout.contains(" pp2") && !r.stdout.contains(" pp4"),
        "{}",
        r.stdout
    );
    let terms: Vec<&str> = r
        .stdout
        .lines()
        .filter(|l| l.contains("time per step") || l.contains("traffic per GPU"))
        .map(|l| l.split('┆').nth(1).unwrap_or("").trim())
        .collect();
    assert!(
        terms.contains(&"compute") && terms.contains(&"TP"),
        "{terms:?}"
    );
    for gone in ["PP comm", "bubble", "PP"] {
        assert!(
            !terms.contains(&gone),
            "{gone} row for two plans with pp 1: {terms:?}"
        );
    }
    // A pipelined pair keeps them.
    let r = run(&["compare", "--params", "512B", "--nodes", "32"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("PP comm") && r.stdout.contains("bubble"));
}

/// The README shows the report committed in reports/seed-512b-32nodes/ as what `tpsim report`
/// writes, but its page said "search: 25340 candidates, 1253 feasible" beside the README's
/// first screen's "search: 29836 candidates, 1103 feasible" for the same scenario, and its
/// report.json gave each plan's range from an older error table (step_s_low 67.38 against the
/// 66.76 `report` writes now). The committed report is what `report` writes.
#[test]
fn the_committed_report_is_what_report_writes() {
    let committed = format!("{}/reports/seed-512b-32nodes", common::ROOT);
    let dir = scratch("new-user-7", "seed");
    let out = dir.join("r");
    let r = run(&[
        "report",
        "plans/seed-512b-32nodes.yaml",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let fix =
        "regenerate it: tpsim report plans/seed-512b-32nodes.yaml --out reports/seed-512b-32nodes";
    let read = |dir: &str| -> Value {
        let mut v: Value =
            serde_json::from_str(&std::fs::read_to_string(format!("{dir}/report.json")).unwrap())
                .unwrap();
        // What the machine that wrote it took, and had.
        v["search"]["elapsed_s"] = Value::Null;
        v["search"]["threads"] = Value::Null;
        v
    };
    let (old, new) = (read(&committed), read(out.to_str().unwrap()));
    assert!(
        old == new,
        "reports/seed-512b-32nodes/report.json is stale; {fix}"
    );
    // The page's search line counts what `plan` counts on the README's first screen.
    let plan = json(&[
        "plan", "--params", "512B", "--nodes", "32", "--format", "json",
    ]);
    let html = std::fs::read_to_string(format!("{committed}/index.html")).unwrap();
    let candidates = plan["search"]["candidates"].as_u64().unwrap();
    assert!(
        html.contains(&format!("search: {candidates} candidates,")),
        "the committed page's search line is not plan's {candidates}; {fix}"
    );
    for figure in ["memory", "step_time", "layout", "timeline"] {
        let a = std::fs::read_to_string(format!("{committed}/{figure}.svg")).unwrap();
        let b = std::fs::read_to_string(out.join(format!("{figure}.svg"))).unwrap();
        assert!(
            a == b,
            "reports/seed-512b-32nodes/{figure}.svg is stale; {fix}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
