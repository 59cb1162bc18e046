//! Figures reviewed as an ML-infrastructure engineer reads them, round 2 (after
//! tests/figures_round1.rs): each test says what its figure showed and what it shows now.

use assert_cmd::Command;
use std::path::{Path, PathBuf};

fn tpsim() -> Command {
    Command::cargo_bin("tpsim").unwrap()
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "tpsim-figures-round2-{}-{name}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Runs `args` with `--report DIR` (or `--out DIR` for `report`); returns DIR and stdout.
fn report(args: &[&str], name: &str) -> (PathBuf, String) {
    let dir = scratch(name);
    let flag = if args[0] == "report" {
        "--out"
    } else {
        "--report"
    };
    let out = tpsim()
        .args(args)
        .args([flag, dir.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (dir, String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The points of every `<polyline>` of `stroke` and `width`.
fn polylines(svg: &str, stroke: &str, width: &str) -> Vec<Vec<(f64, f64)>> {
    let doc = roxmltree::Document::parse(svg).unwrap();
    doc.descendants()
        .filter(|n| {
            n.has_tag_name("polyline")
                && n.attribute("stroke") == Some(stroke)
                && n.attribute("stroke-width") == Some(width)
        })
        .map(|n| {
            n.attribute("points")
                .unwrap_or("")
                .split_whitespace()
                .map(|p| {
                    let (x, y) = p.split_once(',').unwrap();
                    (x.parse().unwrap(), y.parse().unwrap())
                })
                .collect()
        })
        .collect()
}


/// The seed 512B plan's search figure joined its frontier plans with straight segments, as if
/// plans between two of them traded memory for throughput along the line. No plan lies there: the
/// best throughput within a memory budget holds until the next frontier plan's memory. The
/// frontier is now a staircase: each segment horizontal or vertical, rightwards and upwards.
#[test]
fn search_frontier_is_a_staircase() {
    let (dir, _) = report(&["report", "plans/seed-512b-32nodes.yaml"], "search");
    let svg = read(&dir.join("search.svg"));
    // The frontier: the one black 2-pixel line of more than two points.
    let lines: Vec<Vec<(f64, f64)>> = polylines(&svg, "#000000", "2")
        .into_iter()
        .filter(|l| l.len() > 2)
        .collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    let frontier = &lines[0];
    assert!(frontier.len() > 10, "{frontier:?}");
    for w in frontier.windows(2) {
        let ((x0, y0), (x1, y1)) = (w[0], w[1]);
        assert!(
            x0 == x1 || y0 == y1,
            "diagonal frontier segment {:?} -> {:?}",
            w[0],
            w[1]
        );
        // More memory, more throughput (SVG y grows downwards).
        assert!(x1 >= x0 && y1 <= y0, "{:?} -> {:?}", w[0], w[1]);
    }
}

