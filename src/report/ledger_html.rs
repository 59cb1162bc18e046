//! Figure 6: the communication ledger of one plan as an HTML table, one row per collective with
//! how often it runs in a step, and the per-group step totals that add up to `comm.*.wire_bytes`.

use std::fmt::Write as _;

use super::html::escape;
use super::table::link_name;
use crate::cost::ledger::Ledger;

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
            escape(e.site),
            e.scope.as_str(),
            e.count,
            e.ranks,
            e.tensor_bytes / 1e6,
            e.wire_bytes / 1e6,
            link_name(e.link),
            e.time_s * 1e3,
            e.count as f64 * e.wire_bytes / 1e9,
        );
    }
    out.push_str("</tbody>\n<tfoot>");
    for (group, total) in ledger.totals() {
        let _ = write!(
            out,
            "<tr><td colspan=\"11\">{} total sent per GPU per step</td><td class=\"n\">{:.2}</td></tr>",
            group.as_str(),
            total / 1e9
        );
    }
    out.push_str("</tfoot>\n</table>\n");
    out
}
