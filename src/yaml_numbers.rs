//! Whole numbers a YAML file spells other than in decimal digits, and values with a YAML tag
//! (`!!str 989`, which the parser reads as the number 989). The parser reads `tp: +8`,
//! `tp: 0x8`, `tp: 0o10` and `tp: 0b1000` all as 8 and `tp: -0` as 0 without a word, so the value
//! tpsim echoes back would not be the one written. This finds the first such plain scalar in a
//! file, so the reader can refuse it with the digits to write instead. (`tp: 007` is read as the
//! text "007", which a text key keeps as written, such as a commit id, and a number key refuses.)
//!
//! The scan is line by line and deliberately simple: it skips comments, quoted strings (also over
//! several lines) and block scalars (`|`, `>`), and reads every other value between YAML's
//! separators (`: `, `- `, and `, [ ] { }` in flow collections). Keys are not checked.

use crate::yaml_keys::QuotedScalar;

/// A whole number spelled other than in decimal digits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OddNumber {
    /// 1-based line and column of the value.
    pub line: usize,
    pub column: usize,
    /// The key the value is given for on its line (`tp`), when there is one.
    pub key: Option<String>,
    /// The key's path from the top of the file (`plan.tp`), as the parser's messages name it;
    /// None where a list is on the way (or the key is inside nested flow collections).
    pub path: Option<String>,
    /// The value as written.
    pub text: String,
    /// Why it is refused and what to write instead (without the key and value in front).
    pub rule: String,
}

/// The first whole number in `text` spelled with a sign or a base prefix.
pub fn odd_whole_number(text: &str) -> Option<OddNumber> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let normalized = text.replace("\r\n", "\n");
    let mut flow_depth = 0usize;
    let mut quoted = QuotedScalar::default();
    // Inside a block scalar: the indentation of the line that opened it.
    let mut block_parent: Option<usize> = None;
    // The block keys (column, key) that the line at hand may be nested under; None for a list
    // item (`- `).
    let mut parents: Vec<(usize, Option<String>)> = Vec::new();
    for (index, line) in normalized.split(['\n', '\r']).enumerate() {
        let indent = line.len() - line.trim_start_matches(' ').len();
        if let Some(parent) = block_parent {
            if line.trim().is_empty() || indent > parent {
                continue;
            }
            block_parent = None;
        }
        let starts_in_block = !quoted.is_open() && flow_depth == 0;
        if starts_in_block && !line.trim().is_empty() && !line.trim_start().starts_with('#') {
            parents.retain(|&(column, _)| column < indent);
        }
        let mut segment_start: Option<usize> = None;
        let mut key: Option<String> = None;
        // The block key of this line (its column and text), before any flow collection.
        let mut block_key: Option<(usize, String)> = None;
        let mut end = line.len();
        let chars: Vec<(usize, char)> = line.char_indices().collect();
        for (i, &(at, c)) in chars.iter().enumerate() {
            if quoted.consume(c) {
                continue;
            }
            let next = chars.get(i + 1).map(|&(_, c)| c);
            let starts_segment = segment_start.is_none_or(|s| line[s..at].trim().is_empty());
            match c {
                '"' | '\'' if starts_segment => {
                    quoted.open(c);
                    segment_start = None;
                }
                '#' if at == 0 || line[..at].ends_with(char::is_whitespace) => {
                    end = at;
                    break;
                }
                ':' if next.is_none_or(char::is_whitespace)
                    || (flow_depth > 0 && matches!(next, Some(',' | ']' | '}'))) =>
                {
                    key = segment_start.map(|s| line[s..at].trim().to_string());
                    if flow_depth == 0 {
                        block_key = segment_start.zip(key.clone());
                    }
                    segment_start = None;
                }
                '-' | '?' if starts_segment && next.is_none_or(char::is_whitespace) => {
                    if flow_depth == 0 {
                        parents.push((at, None));
                    }
                    segment_start = None;
                }
                '[' | '{' if starts_segment => {
                    flow_depth += 1;
                    segment_start = None;
                    key = None;
                }
                ',' | ']' | '}' if flow_depth > 0 => {
                    if let Some(found) = check_value(line, index, segment_start, at, &key) {
                        let path = (flow_depth == 1)
                            .then(|| key_path(&parents, block_key.as_ref(), key.as_deref()))
                            .flatten();
                        return Some(OddNumber { path, ..found });
                    }
                    if c != ',' {
                        flow_depth -= 1;
                    }
                    segment_start = None;
                    key = None;
                }
                _ if segment_start.is_none() && !c.is_whitespace() => segment_start = Some(at),
                _ => {}
            }
        }
        if quoted.is_open() {
            continue;
        }
        if let Some(start) = segment_start {
            let value = line[start..end].trim();
            // `doc: |` or `- >-`: the lines below, indented deeper, are text.
            if flow_depth == 0
                && (value.starts_with('|') || value.starts_with('>'))
                && value[1..]
                    .bytes()
                    .all(|b| b.is_ascii_digit() || b == b'+' || b == b'-')
            {
                block_parent = Some(indent);
                continue;
            }
        }
        if let Some(found) = check_value(line, index, segment_start, end, &key) {
            let path = match flow_depth {
                0 => key_path(&parents, None, key.as_deref()),
                _ => None,
            };
            return Some(OddNumber { path, ..found });
        }
        // `plan:` with nothing after it: the lines below, indented deeper, are its keys.
        if let (0, None, Some((column, key))) = (flow_depth, segment_start, block_key) {
            parents.push((column, Some(key)));
        }
    }
    None
}

/// `plan.tp` for the key `tp` under the block keys `parents` (and `flow_key`, the key of the flow
/// collection it is in); None where a list is on the way or there is no key.
fn key_path(
    parents: &[(usize, Option<String>)],
    flow_key: Option<&(usize, String)>,
    key: Option<&str>,
) -> Option<String> {
    let mut path = Vec::new();
    for (_, parent) in parents {
        path.push(parent.as_deref()?);
    }
    if let Some((_, flow_key)) = flow_key {
        path.push(flow_key);
    }
    path.push(key?);
    Some(path.join("."))
}

/// The value `line[start..end]` (line `index`, 0-based) as an [`OddNumber`] when it is one.
fn check_value(
    line: &str,
    index: usize,
    start: Option<usize>,
    end: usize,
    key: &Option<String>,
) -> Option<OddNumber> {
    let start = start?;
    let value = line[start..end].trim();
    let rule = odd_spelling(value, key.as_deref())?;
    let column = line[..start].chars().count() + 1;
    Some(OddNumber {
        line: index + 1,
        column,
        key: key.clone(),
        path: None,
        text: value.to_string(),
        rule,
    })
}

/// Why `value` is refused, with what to write; `None` for anything that is not a whole number
/// spelled oddly (plain digits, a negative number, a float, text).
fn odd_spelling(value: &str, key: Option<&str>) -> Option<String> {
    let write = |digits: &str| match key {
        // `global_batch: -0` is 0 to YAML, which a count refuses: offering it would only move
        // the error.
        Some(key) if digits == "0" && crate::specs::POSITIVE_KEYS.contains(&key) => {
            format!("write a whole number of 1 or more, e.g. {key}: 1")
        }
        Some(key) => format!("write {key}: {digits}"),
        None => format!("write {digits}"),
    };
    // A tag (`!!str 989`, `!note text`): the parser reads the value after it as if untagged, so
    // `!!str 989` was the number 989 and `!important note` the text "note", without a word.
    if let Some(tagged) = value.strip_prefix('!') {
        let (tag, rest) = tagged
            .split_once(char::is_whitespace)
            .unwrap_or((tagged, ""));
        let rest = rest.trim();
        let fix = if rest.is_empty() {
            "drop the tag".to_string()
        } else {
            format!(
                "drop the tag ({}), or quote the whole value as text",
                write(rest)
            )
        };
        return Some(format!(
            "carries the YAML tag !{tag}, which tpsim does not read (the value after it would be taken as untagged without a word); {fix}"
        ));
    }
    let (sign, body) = match value.strip_prefix(['+', '-']) {
        Some(rest) => (&value[..1], rest),
        None => ("", value),
    };
    let based =
        [
            ("0x", 16, "hexadecimal"),
            ("0o", 8, "octal"),
            ("0b", 2, "binary"),
        ]
        .into_iter()
        .find_map(|(prefix, radix, name)| {
            let digits = body
                .get(..2)
                .filter(|p| p.eq_ignore_ascii_case(prefix))
                .map(|_| &body[2..])?;
            (!digits.is_empty() && digits.chars().all(|c| c == '_' || c.is_digit(radix)))
                .then_some((digits.replace('_', ""), radix, name))
        });
    if let Some((digits, radix, name)) = based {
        let fix = match u128::from_str_radix(&digits, radix) {
            Ok(n) if sign != "-" || n == 0 => write(&n.to_string()),
            _ => "write the number in decimal digits".to_string(),
        };
        return Some(format!(
            "is written in {name}, which tpsim does not read (YAML would take it without a word); a whole number is decimal digits only, so {fix}"
        ));
    }
    // `007` unsigned is read as the text "007", so a string key keeps it as written and a number
    // key is refused by its type (`specs::yaml_error` words that); only a sign is lost silently.
    if sign.is_empty() {
        return None;
    }
    let plain = crate::units::plain_digits_for(value)?;
    Some(if sign == "-" {
        format!(
            "has a minus sign, which a whole number does not take (YAML would read 0 without a word); {}",
            write(&plain)
        )
    } else {
        format!(
            "has a plus sign, which YAML drops without a word; a whole number is digits only, so {}",
            write(&plain)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(text: &str) -> Option<(usize, usize, Option<String>, String)> {
        odd_whole_number(text).map(|o| (o.line, o.column, o.key, o.text))
    }

    #[test]
    fn finds_signs_and_bases() {
        let some = |line, column, key: &str, text: &str| {
            Some((line, column, Some(key.to_string()), text.to_string()))
        };
        assert_eq!(found("a: 1\nplan:\n  tp: +8\n"), some(3, 7, "tp", "+8"));
        assert_eq!(found("tp: +007 # seven\n"), some(1, 5, "tp", "+007"));
        assert_eq!(found("plan: {pp: 1, tp: 0x8}\n"), some(1, 19, "tp", "0x8"));
        assert_eq!(found("tp: 0b1000\r\n"), some(1, 5, "tp", "0b1000"));
        assert_eq!(found("tp: -0\n"), some(1, 5, "tp", "-0"));
        assert_eq!(found("l: [1, +2]\n"), Some((1, 8, None, "+2".to_string())));
        assert_eq!(found("- +08\n").map(|f| f.3), Some("+08".to_string()));
    }

    #[test]
    fn names_the_path_of_the_key() {
        let path = |text| odd_whole_number(text).and_then(|o| o.path);
        assert_eq!(path("a: 1\nplan:\n  tp: +8\n").as_deref(), Some("plan.tp"));
        assert_eq!(
            path("model:\n  layers: 2\n  moe:\n    experts: 0x8\nplan:\n  tp: 8\n").as_deref(),
            Some("model.moe.experts")
        );
        assert_eq!(
            path("plan:\n  tp: 8\n# c\n\nnodes: -0\n").as_deref(),
            Some("nodes")
        );
        assert_eq!(path("plan: {pp: 1, tp: 0x8}\n").as_deref(), Some("plan.tp"));
        assert_eq!(path("runs:\n  - name: a\n    gpus: +8\n"), None);
        assert_eq!(path("l: [1, +2]\n"), None);
    }

    #[test]
    fn leaves_plain_numbers_text_and_comments_alone() {
        for text in [
            "tp: 8\npp: 0\nlr: 0.5\nx: -3\nname: a+8\ncommit: 0612345\n",
            "name: \"007\"\nother: '+8'\n",
            "note: \"x\\\" 007\"\n",
            "# tp: +8\ntp: 8 # not +8\n",
            "doc: |\n  tp: +8\n  007\ntp: 8\n",
            "eps: 1e-05\nlr: +0.5\ndate: 2024-01-02\nv: 0.05\n",
            "x: \"a\n  +8 b\"\n",
        ] {
            assert_eq!(found(text), None, "{text:?}");
        }
    }
}
