//! Figure 6: the communication ledger of one plan as an HTML table, one row per collective with
//! how often it runs in a step, and the step totals of each `comm.*` group (equal to its
//! `comm.*.wire_bytes`), broken down into the ledger groups that make it up.

use std::fmt::Write as _;

use super::html::escape;
use super::table::link_name;
use crate::cost::ledger::Ledger;

/// A count as the ledger holds it: whole, or the average per stage of a fractional share
/// (`LedgerEntry::count`), shown to two decimals.
fn count_text(count: f64) -> String {
    if count.fract() == 0.0 {
        format!("{count:.0}")
    } else {
        format!("{count:.2}")
    }
}

pub(crate) fn ledger_table(ledger: &Ledger) -> String {
    let mut out = String::from(
        "<table class=\"ledger\">\n<thead><tr><th>group</th><th>operation</th><th>pass</th><th>where</th><th>how often</th><th>count per step</th><th>ranks</th><th>tensor MB</th><th>sent MB</th><th>link</th><th>time ms</th><th>step total GB</th></tr></thead>\n<tbody>\n",
    );
    for e in &ledger.entries {
        let op = e.op.as_str();
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{op}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{:.2}</td><td class=\"n\">{:.2}</td><td>{}</td><td class=\"n\">{:.3}</td><td class=\"n\">{:.2}</td></tr>",
            e.group.as_str(),
            e.pass.as_str(),
            if e.bf16_layers {
                format!("{} — on the layers kept in bf16", escape(e.site))
            } else {
                escape(e.site)
            },
            e.scope.as_str(),
            count_text(e.count),
            e.ranks,
            e.tensor_bytes / 1e6,
            e.wire_bytes / 1e6,
            link_name(e.link),
            e.time_s * 1e3,
            e.count * e.wire_bytes / 1e9,
        );
    }
    out.push_str("</tbody>\n<tfoot>");
    for total in ledger.totals() {
        let _ = write!(
            out,
            "<tr><td colspan=\"11\">{} total sent per GPU per step</td><td class=\"n\">{:.2}</td></tr>",
            total.group.as_str(),
            total.wire_bytes / 1e9
        );
        // EP holding expert TP, DP holding expert DP: each ledger group's share beneath.
        if total.parts.iter().any(|(kind, _)| *kind != total.group) {
            for (kind, bytes) in &total.parts {
                let _ = write!(
                    out,
                    "<tr><td colspan=\"11\">of which {} rows</td><td class=\"n\">{:.2}</td></tr>",
                    kind.as_str(),
                    bytes / 1e9
                );
            }
        }
    }
    out.push_str("</tfoot>\n</table>\n");
    out
}
