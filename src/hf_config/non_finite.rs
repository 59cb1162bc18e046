//! `NaN`, `Infinity` and `-Infinity` in a `config.json`: Python's `json.dump` writes them for a
//! non-finite float (its `allow_nan=True` default, docs.python.org/3/library/json.html "Infinite
//! and NaN Number Values"), and JSON (RFC 8259 §6: "Numeric values that cannot be represented ...
//! (such as Infinity and NaN) are not permitted") and serde_json refuse them. [`non_finite`] finds
//! the one serde_json stopped at and the key that holds it, so the error names both.

/// The literals Python's json module writes for non-finite floats, longest first (`-Infinity`
/// before `Infinity`).
const LITERALS: [&str; 3] = ["-Infinity", "Infinity", "NaN"];

/// Where serde_json's error `err` stops at one of [`LITERALS`] in `text`: that literal and the key
/// path holding it (`rope_scaling.factor`, `mlp_only_layers[1]`; `None` for a bare value).
pub(super) fn non_finite(
    text: &str,
    err: &serde_json::Error,
) -> Option<(&'static str, Option<String>)> {
    let at = error_offset(text, err);
    // The error points at or just past the literal's first letters ("-I" is an invalid number):
    // the earliest start whose literal reaches it, so `-Infinity` is not read as `Infinity`.
    (at.saturating_sub(LITERALS[0].len())..=at.min(text.len()))
        .filter(|&i| text.is_char_boundary(i))
        .find_map(|i| {
            let literal = LITERALS.into_iter().find(|l| text[i..].starts_with(l))?;
            let end = i + literal.len();
            // A literal, not the start of a longer word or inside one.
            let bounded = !text[end..].starts_with(|c: char| c.is_alphanumeric())
                && !text[..i].ends_with(|c: char| c.is_alphanumeric());
            // The error's position lies within the literal or just past it.
            (bounded && at <= end + 1).then(|| (literal, key_path(text, i)))
        })
}

/// The byte of `text` that serde_json's error `err` points at: its line is 1-based and its column
/// counts bytes from the line's start (serde_json's `Error::column`).
fn error_offset(text: &str, err: &serde_json::Error) -> usize {
    let line_start: usize = text
        .split_inclusive('\n')
        .take(err.line().saturating_sub(1))
        .map(str::len)
        .sum();
    line_start + err.column()
}

/// serde_json's column for `err` counted in characters, as an editor counts them: its own counts
/// bytes, so each character before it that UTF-8 writes in 2 to 4 bytes (`ü`, `中`) moved the
/// column 1 to 3 places right. A column inside a character counts that character whole.
pub(super) fn char_column(text: &str, err: &serde_json::Error) -> usize {
    let mut at = error_offset(text, err).min(text.len());
    while !text.is_char_boundary(at) {
        at += 1;
    }
    let line_start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    // A column of 0 (the error at the line's end, before its newline) stays 0.
    let chars = text[line_start..at].chars().count();
    if err.column() == 0 { 0 } else { chars.max(1) }
}

/// The keys of the objects and the indices of the arrays that hold byte `offset` of `text`,
/// outermost first, as Python would index them (`rope_scaling.factor`, `mlp_only_layers[1]`,
/// `layer_types[2][0]`): a forward scan that skips strings whole, escapes included, and counts an
/// array's elements by its commas. A list's key alone left the user to find the element.
fn key_path(text: &str, offset: usize) -> Option<String> {
    enum Open {
        Object(Option<String>),
        /// The index of the element being read.
        Array(usize),
    }
    let bytes = text.as_bytes();
    let mut open: Vec<Open> = Vec::new();
    let mut last_string: Option<String> = None;
    let mut i = 0;
    while i < offset.min(bytes.len()) {
        match bytes[i] {
            b'"' => {
                let start = i + 1;
                i = start;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                last_string = text.get(start..i.min(bytes.len())).map(str::to_string);
            }
            b':' => {
                if let Some(Open::Object(key)) = open.last_mut() {
                    *key = last_string.take();
                }
            }
            b'{' => open.push(Open::Object(None)),
            b'[' => open.push(Open::Array(0)),
            b',' => {
                if let Some(Open::Array(index)) = open.last_mut() {
                    *index += 1;
                }
            }
            b'}' | b']' => {
                open.pop();
            }
            _ => {}
        }
        i += 1;
    }
    let mut path = String::new();
    for o in open {
        match o {
            Open::Object(Some(key)) => {
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(&key);
            }
            Open::Object(None) => {}
            Open::Array(index) => path.push_str(&format!("[{index}]")),
        }
    }
    (!path.is_empty()).then_some(path)
}
