//! Where a key given twice in a YAML mapping is. The parser reports a duplicate key at the start of
//! its mapping (`plan:`'s first key, or line 1 for the top level), a line that is neither copy;
//! this finds both copies in the text, so the message can point at them.

/// The 1-based lines of the first and second `key` of the mapping that starts at `line`:`column`
/// (1-based, as the parser reports it), and the column of the second. `None` when the text there
/// is no mapping this reads (the message then gives no location rather than a wrong one).
pub fn repeated_key(text: &str, line: usize, column: usize, key: &str) -> Option<Repeated> {
    let lines: Vec<&str> = text.lines().collect();
    let first_line = lines.get(line.checked_sub(1)?)?;
    let indent = first_line
        .char_indices()
        .nth(column.checked_sub(1)?)
        .map(|(at, _)| at)?;
    let start = &first_line[indent..];
    if start.starts_with('{') {
        return flow_mapping(&lines, line - 1, indent, key);
    }
    let mut found: Vec<(usize, usize)> = Vec::new();
    for (at, text) in lines.iter().enumerate().skip(line - 1) {
        let body = if at == line - 1 {
            start
        } else {
            let trimmed = text.trim_start_matches(' ');
            if trimmed.is_empty() || trimmed.starts_with('#') {
                continue;
            }
            let this_indent = text.len() - trimmed.len();
            if this_indent < indent {
                break;
            }
            // Deeper lines belong to a value; a `- ` item at the key's indentation is a list
            // value written flush with its key.
            if this_indent > indent || trimmed.starts_with("- ") || trimmed == "-" {
                continue;
            }
            trimmed
        };
        if key_of(body) == Some(key) {
            found.push((at + 1, text[..text.len() - body.len()].chars().count() + 1));
            if let [(first, _), (second, second_column)] = found[..] {
                return Some(Repeated {
                    first_line: first,
                    line: second,
                    column: second_column,
                });
            }
        }
    }
    None
}

/// Both copies of a key given twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repeated {
    pub first_line: usize,
    /// Where the second copy is.
    pub line: usize,
    pub column: usize,
}

/// The key a `key: value` line opens with (quoted or not); `None` for a line that is no key.
fn key_of(body: &str) -> Option<&str> {
    for quote in ['"', '\''] {
        if let Some(rest) = body.strip_prefix(quote) {
            let (key, after) = rest.split_once(quote)?;
            return after.trim_start().starts_with(':').then_some(key);
        }
    }
    let colon = body
        .char_indices()
        .find(|&(at, c)| {
            c == ':'
                && body[at + 1..]
                    .chars()
                    .next()
                    .is_none_or(char::is_whitespace)
        })
        .map(|(at, _)| at)?;
    Some(body[..colon].trim_end())
}

/// `{tp: 8, pp: 1, tp: 2}`, possibly over several lines: the keys at its first level.
fn flow_mapping(lines: &[&str], from: usize, indent: usize, key: &str) -> Option<Repeated> {
    let mut depth = 0usize;
    let mut quoted = QuotedScalar::default();
    let mut expect_key = false;
    let mut found: Vec<(usize, usize)> = Vec::new();
    for (at, text) in lines.iter().enumerate().skip(from) {
        let skip = if at == from { indent } else { 0 };
        for (i, c) in text.char_indices().skip_while(|&(i, _)| i < skip) {
            if quoted.consume(c) {
                continue;
            }
            if expect_key && depth == 1 && !c.is_whitespace() {
                expect_key = false;
                if key_of(&text[i..]) == Some(key) {
                    found.push((at + 1, text[..i].chars().count() + 1));
                    if let [(first, _), (second, column)] = found[..] {
                        return Some(Repeated {
                            first_line: first,
                            line: second,
                            column,
                        });
                    }
                }
            }
            match c {
                '"' | '\'' => quoted.open(c),
                '#' if text[..i].ends_with(char::is_whitespace) => break,
                '{' | '[' => {
                    depth += 1;
                    expect_key = depth == 1;
                }
                '}' | ']' => {
                    depth = depth.checked_sub(1)?;
                    if depth == 0 {
                        return None;
                    }
                }
                ',' if depth == 1 => expect_key = true,
                _ => {}
            }
        }
    }
    None
}

/// Where a line-by-line scan stands inside a quoted YAML scalar. Inside double quotes a
/// backslash escapes the next character (`"x\"y"` is one string); single quotes escape only by
/// doubling (`'it''s'`), which closing and reopening reads right.
#[derive(Debug, Default)]
pub(crate) struct QuotedScalar {
    quote: Option<char>,
    escaped: bool,
}

impl QuotedScalar {
    /// A scalar opens at `quote`.
    pub(crate) fn open(&mut self, quote: char) {
        self.quote = Some(quote);
        self.escaped = false;
    }

    /// Whether a quoted scalar is open.
    pub(crate) fn is_open(&self) -> bool {
        self.quote.is_some()
    }

    /// Takes `c` when a quoted scalar is open (closing it at its unescaped quote) and says so;
    /// outside quotes it takes nothing.
    pub(crate) fn consume(&mut self, c: char) -> bool {
        let Some(quote) = self.quote else {
            return false;
        };
        if self.escaped {
            self.escaped = false;
        } else if quote == '"' && c == '\\' {
            self.escaped = true;
        } else if c == quote {
            self.quote = None;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_both_copies_in_block_and_flow_mappings() {
        let text = "# c\nname: x\nplan:\n  tp: 8\n  pp: 1\n  tp: 4\nnodes: 1\n";
        assert_eq!(
            repeated_key(text, 4, 3, "tp"),
            Some(Repeated {
                first_line: 4,
                line: 6,
                column: 3
            })
        );
        let top = "name: x\nsources:\n- \"nodes: a\"\nnodes: 1\nplan:\n  nodes: 3\nnodes: 2\n";
        assert_eq!(
            repeated_key(top, 1, 1, "nodes"),
            Some(Repeated {
                first_line: 4,
                line: 7,
                column: 1
            })
        );
        let flow = "plan: {tp: 8, pp: {tp: 1}, 'tp': 2}\n";
        assert_eq!(
            repeated_key(flow, 1, 7, "tp"),
            Some(Repeated {
                first_line: 1,
                line: 1,
                column: 28
            })
        );
        let item = "runs:\n- layers: 2\n  hidden: 8\n  layers: 3\n- layers: 4\n";
        assert_eq!(
            repeated_key(item, 2, 3, "layers"),
            Some(Repeated {
                first_line: 2,
                line: 4,
                column: 3
            })
        );
        // An escaped quote inside a double-quoted value does not end it.
        let escaped = "{name: \"x\\\"y, tp: 1\", layers: 2, 'a''b': 1, layers: 3}\n";
        assert_eq!(
            repeated_key(escaped, 1, 1, "layers"),
            Some(Repeated {
                first_line: 1,
                line: 1,
                column: 45
            })
        );
        // A key the scan cannot find (an anchor, say) gives no location rather than a wrong one.
        assert_eq!(repeated_key("a: 1\n", 1, 1, "b"), None);
        assert_eq!(repeated_key("a: 1\n", 9, 1, "a"), None);
    }
}
