//! The one way tpsim reads a file the user names: spec files, plans, calibration profiles, run
//! files, Hugging Face configs and Megatron launch scripts all come through [`read_text`].
//!
//! A spec is kilobytes, so the reader refuses what cannot be one before parsing it: anything that
//! is not a regular file (a FIFO would block forever, `/dev/zero` never ends, a directory is not
//! text), more than [`MAX_INPUT_BYTES`], and nesting deeper than [`MAX_NESTING_DEPTH`] (the YAML
//! parser's time grows with the square of the depth: a 200 KB `[[[…]]]` took 45 s). The depth
//! scan is linear and conservative: it counts flow brackets, block indentation levels and `- `
//! sequence markers, so it can only over-count.

use std::io::Read;
use std::path::Path;

/// Largest input file read, in bytes. The largest bundled input (`validation/published_runs.yaml`)
/// is about 40 KB; a calibration profile with every measurement is under 100 KB.
pub const MAX_INPUT_BYTES: u64 = 4 << 20;
/// Deepest nesting accepted in a YAML or JSON input. tpsim's own files nest at most 5 deep
/// (profile → calibration → collectives → points → item); Hugging Face configs about 4.
pub const MAX_NESTING_DEPTH: usize = 64;
/// Most characters of user input quoted back in an error message.
pub const MAX_QUOTED_CHARS: usize = 80;

#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error(
        "{flag} {path}: cannot read it: {reason}; check the path{hint}",
        hint = if *.bundled_hint { ", or give a bundled name" } else { "" }
    )]
    Read {
        flag: String,
        path: String,
        reason: String,
        bundled_hint: bool,
    },
    #[error("{flag} \"\": names no file (the path is empty); give the path of the file to read")]
    EmptyPath { flag: String },
    /// `-`, which many tools read as standard input: tpsim reads its inputs from files, and said
    /// "cannot read it: No such file or directory; check the path", as if `-` were misspelt.
    #[error(
        "{flag} -: tpsim reads this input from a file, not standard input, and there is no file named '-'; save the input to a file and give its path, e.g. {flag} {}",
        match flag.as_str() {
            "--hf-config" => "config.json",
            "--megatron-args" => "@launch.sh",
            _ => "input.yaml",
        }
    )]
    StandardInput { flag: String },
    #[error(
        "{flag} {path}: is {kind}, not a regular file; tpsim reads inputs from files only (save it to a file first)"
    )]
    NotRegular {
        flag: String,
        path: String,
        kind: &'static str,
    },
    #[error(
        "{flag} {path}: is larger than {max} bytes (4 MiB), the limit for an input file; a spec is kilobytes, so check that this is the right file",
        max = MAX_INPUT_BYTES
    )]
    TooLarge { flag: String, path: String },
    #[error(
        "{flag} {path}: is not UTF-8 text; give {}",
        if flag == "--megatron-args" { "the launch line or script as text" } else { "a YAML or JSON file" }
    )]
    NotText { flag: String, path: String },
    #[error(
        "{origin}:{line}: nesting is deeper than {max} levels, the limit for an input file (tpsim's files nest at most 5 deep); check the file",
        max = MAX_NESTING_DEPTH
    )]
    TooDeep { origin: String, line: usize },
}

fn kind_of(file_type: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if file_type.is_dir() {
        "a directory"
    } else if file_type.is_fifo() {
        "a FIFO (named pipe)"
    } else if file_type.is_char_device() {
        "a character device"
    } else if file_type.is_block_device() {
        "a block device"
    } else if file_type.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

/// Reads the text of the input file `path`, given with `flag` (named in errors), refusing
/// non-regular files, files over [`MAX_INPUT_BYTES`] and non-UTF-8 text. It does not check the
/// nesting depth: call [`check_depth`] before handing YAML or JSON to a parser, or use
/// [`read_structured`].
pub fn read_text(flag: &str, path: &str) -> Result<String, InputError> {
    read_text_inner(flag, path, false)
}

fn read_text_inner(flag: &str, path: &str, bundled_hint: bool) -> Result<String, InputError> {
    let shown = quote(path);
    let read_error = |err: std::io::Error| InputError::Read {
        flag: flag.to_string(),
        path: shown.clone(),
        reason: link_reason(path).unwrap_or_else(|| io_reason(&err)),
        bundled_hint,
    };
    // An empty path said `"": cannot read it: No such file or directory`, naming no file.
    if path.is_empty() {
        return Err(InputError::EmptyPath {
            flag: flag.to_string(),
        });
    }
    if path == "-" && std::fs::symlink_metadata(Path::new(path)).is_err() {
        return Err(InputError::StandardInput {
            flag: flag.to_string(),
        });
    }
    // Follows symlinks, and does not open the file: opening a FIFO blocks until a writer comes.
    let metadata = std::fs::metadata(Path::new(path)).map_err(read_error)?;
    if !metadata.file_type().is_file() {
        return Err(InputError::NotRegular {
            flag: flag.to_string(),
            path: shown,
            kind: kind_of(&metadata.file_type()),
        });
    }
    let file = std::fs::File::open(path).map_err(read_error)?;
    // Checked again on the open file, in case the path was swapped in between.
    let opened = file.metadata().map_err(read_error)?;
    if !opened.file_type().is_file() {
        return Err(InputError::NotRegular {
            flag: flag.to_string(),
            path: shown,
            kind: kind_of(&opened.file_type()),
        });
    }
    let mut bytes = Vec::new();
    file.take(MAX_INPUT_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    if bytes.len() as u64 > MAX_INPUT_BYTES {
        return Err(InputError::TooLarge {
            flag: flag.to_string(),
            path: shown,
        });
    }
    String::from_utf8(bytes).map_err(|_| InputError::NotText {
        flag: flag.to_string(),
        path: shown,
    })
}

/// [`read_text`] for a YAML spec given by name or path (the error suggests a bundled name),
/// without a leading byte-order mark ([`without_bom`]).
pub fn read_spec_text(flag: &str, path: &str) -> Result<String, InputError> {
    read_text_inner(flag, path, true).map(without_bom)
}

/// [`read_spec_text`] for a YAML spec that has no bundled names (a calibrated profile): the
/// error suggests none.
pub fn read_spec_file_text(flag: &str, path: &str) -> Result<String, InputError> {
    read_text_inner(flag, path, false).map(without_bom)
}

/// [`read_structured`] for a YAML file (a plan, a runs file), without a leading byte-order mark.
pub fn read_yaml(flag: &str, path: &str) -> Result<String, InputError> {
    read_structured(flag, path).map(without_bom)
}

/// `text` without the UTF-8 byte-order mark Windows editors put at the start of a file. YAML
/// allows one there (YAML 1.2 §5.2), but the parser read `BOM nodes: 1 ... plan: ...` as a
/// mapping without `plan` ("missing key plan"). JSON does not allow one, so Hugging Face configs
/// keep theirs and are refused, as transformers refuses them.
fn without_bom(text: String) -> String {
    match text.strip_prefix('\u{feff}') {
        Some(rest) => rest.to_string(),
        None => text,
    }
}

/// [`read_text`] then [`check_depth`]: the text of a YAML or JSON input, safe to parse.
pub fn read_structured(flag: &str, path: &str) -> Result<String, InputError> {
    let text = read_text(flag, path)?;
    check_depth(&quote(path), &text)?;
    Ok(text)
}

/// Whether nothing at all is at `path`: not a file, and not a link either (a link that loops or
/// points nowhere is there, and [`read_text`] says what is wrong with it).
///
/// `-` is never absent: it is how many tools name standard input, which tpsim does not read, and
/// [`read_text`] says so rather than "no such file".
pub fn is_absent(path: &str) -> bool {
    path != "-" && std::fs::symlink_metadata(Path::new(path)).is_err()
}

/// Why the symbolic link at `path` leads to no file, in words: it loops, or what it points to is
/// missing. None when `path` is no link, or one that leads somewhere.
fn link_reason(path: &str) -> Option<String> {
    let path = Path::new(path);
    if !std::fs::symlink_metadata(path)
        .ok()?
        .file_type()
        .is_symlink()
    {
        return None;
    }
    let err = std::fs::metadata(path).err()?;
    let target = std::fs::read_link(path).ok()?;
    let target = quote(&target.to_string_lossy());
    Some(if err.raw_os_error() == Some(libc::ELOOP) {
        format!(
            "it is a symbolic link to {target} that loops (the links point back to each other), so it leads to no file"
        )
    } else if err.kind() == std::io::ErrorKind::NotFound {
        format!("it is a symbolic link to {target}, which does not exist")
    } else {
        format!("it is a symbolic link to {target}: {}", io_reason(&err))
    })
}

/// The OS error without Rust's " (os error N)" suffix.
fn io_reason(err: &std::io::Error) -> String {
    let text = err.to_string();
    match text.find(" (os error") {
        Some(i) => text[..i].to_string(),
        None => text,
    }
}

/// Refuses text nested deeper than [`MAX_NESTING_DEPTH`] in one linear pass. Counts, per line,
/// the block indentation levels open (YAML), the `- ` sequence markers that start it (YAML), and
/// the open `[`/`{` brackets outside quoted strings (YAML flow style and JSON). It over-counts
/// rather than under-counts (a bracket inside a plain scalar counts), which only matters for files
/// near the limit, and tpsim's own are more than ten times below it.
pub fn check_depth(origin: &str, text: &str) -> Result<(), InputError> {
    let mut indents: Vec<usize> = Vec::new();
    let mut brackets: usize = 0;
    for (index, line) in text.lines().enumerate() {
        let body = line.trim_start_matches(' ');
        let indent = line.len() - body.len();
        let blank = body.is_empty() || body.starts_with('#');
        if !blank && brackets == 0 {
            while indents.last().is_some_and(|&top| top >= indent) {
                indents.pop();
            }
            indents.push(indent);
        }
        let mut dashes = 0;
        let mut rest = body;
        while let Some(after) = rest.strip_prefix("- ") {
            dashes += 1;
            rest = after.trim_start_matches(' ');
        }
        let mut quote_char: Option<char> = None;
        let mut escaped = false;
        let mut previous = ' ';
        for c in rest.chars() {
            match quote_char {
                Some(q) => {
                    if escaped {
                        escaped = false;
                    } else if c == '\\' && q == '"' {
                        escaped = true;
                    } else if c == q {
                        quote_char = None;
                    }
                }
                None => match c {
                    '"' | '\'' if previous == ' ' || "[{,:".contains(previous) => {
                        quote_char = Some(c)
                    }
                    '#' if previous == ' ' || previous == '\t' => break,
                    '[' | '{' => {
                        brackets += 1;
                        if indents.len() + dashes + brackets > MAX_NESTING_DEPTH {
                            return Err(InputError::TooDeep {
                                origin: origin.to_string(),
                                line: index + 1,
                            });
                        }
                    }
                    ']' | '}' => brackets = brackets.saturating_sub(1),
                    _ => {}
                },
            }
            previous = c;
        }
        if indents.len() + dashes + brackets > MAX_NESTING_DEPTH {
            return Err(InputError::TooDeep {
                origin: origin.to_string(),
                line: index + 1,
            });
        }
    }
    Ok(())
}

/// User input as it may appear in an error message: control characters escaped (a raw ESC, BEL or
/// NUL would reach the terminal), at most [`MAX_QUOTED_CHARS`] characters, the cut marked, and
/// put in double quotes when it is empty or holds a space or a quote, so that where it starts and
/// ends is plain (`--run "x y": ...`, not `--run x y: ...`; `--run "": ...`). A plain word or
/// path is shown as typed.
pub fn quote(text: &str) -> String {
    let ambiguous = text.is_empty()
        || text
            .chars()
            .take(MAX_QUOTED_CHARS)
            .any(|c| c.is_whitespace() || c == '"' || c == '\'');
    if !ambiguous {
        return escape(text);
    }
    in_quotes(text)
}

/// User input in double quotes whatever it holds, escaped as [`quote`] escapes it (a quote or a
/// backslash in it with a backslash before it), for a message that always quotes the value:
/// formatted with `{:?}` after [`escape`], a tab showed as `\\t`.
pub fn in_quotes(text: &str) -> String {
    let mut out = String::from('"');
    for (count, c) in text.chars().enumerate() {
        if count == MAX_QUOTED_CHARS {
            out.push('…');
            break;
        }
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            _ => push_escaped(&mut out, c),
        }
    }
    out.push('"');
    out
}

/// A spec file's `name` (`key`: `name`, `model.name`), which every table, report and saved plan
/// shows: refused when empty or blank (the tables printed "1 node x 8  = 8 GPUs") or when it
/// holds a control character (a NUL or an escape sequence went to the terminal as it was).
pub fn check_spec_name(key: &str, name: &str, example: &str) -> Result<(), String> {
    if name.trim().is_empty() {
        return Err(format!(
            "{key}: {} is {} (rule: the name is shown in every table, report and saved plan); give it a name, e.g. {key}: {example}",
            quote(name),
            if name.is_empty() { "empty" } else { "blank" }
        ));
    }
    if name.chars().any(|c| c.is_control() || is_bidi_control(c)) {
        return Err(format!(
            "{key}: {} holds a control character (rule: the name is shown in every table, report and saved plan, where it would garble the output); write it with visible characters only, e.g. {key}: {example}",
            quote(name)
        ));
    }
    Ok(())
}

/// User input as it may appear in a name tpsim shows (not only in errors): control characters and
/// spaces other than a plain one escaped, at most [`MAX_QUOTED_CHARS`] characters, the cut marked,
/// never put in quotes.
pub fn escape(text: &str) -> String {
    let mut out = String::new();
    for (count, c) in text.chars().enumerate() {
        if count == MAX_QUOTED_CHARS {
            out.push('…');
            break;
        }
        push_escaped(&mut out, c);
    }
    out
}

/// Pushes `c`, escaped when it is a control character or a space other than U+0020 (a
/// no-break or zero-width space reads as a plain one, or as nothing).
/// A Unicode bidirectional control (U+202A-U+202E embeddings and overrides, U+2066-U+2069
/// isolates, the marks U+200E, U+200F and U+061C): not `char::is_control`, yet it reorders the
/// text after it on a terminal or a page, so a name holding U+202E printed its table row, or the
/// rest of an error line, backwards.
pub fn is_bidi_control(c: char) -> bool {
    matches!(
        c,
        '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}' | '\u{061c}'
    )
}

fn push_escaped(out: &mut String, c: char) {
    let invisible = c.is_whitespace() && c != ' '
        || matches!(c, '\u{200b}'..='\u{200d}' | '\u{2060}' | '\u{feff}')
        || is_bidi_control(c);
    if c.is_control() || invisible {
        out.extend(c.escape_default());
    } else {
        out.push(c);
    }
}

/// A message built by a parser (serde, yaml, clap) made safe to print as one line: control
/// characters and line breaks escaped, and every quoted stretch (`"…"`, `` `…` ``) longer than
/// [`MAX_QUOTED_CHARS`] cut, so a megabyte scalar or a whole file is never echoed.
pub fn sanitize_message(message: &str) -> String {
    let mut out = String::with_capacity(message.len().min(1024));
    let mut open: Option<char> = None;
    let mut quoted = 0usize;
    // After a backslash inside a quote: `"we\"ird.yaml"` (a path with a quote, as `quote`
    // writes it) is one quoted stretch, not one closed early and another left open to the end of
    // the line, which would cut the fix after it.
    let mut escaped = false;
    for c in message.chars() {
        match open {
            Some(q) if c == q && !escaped => {
                open = None;
                out.push(c);
            }
            Some(_) => {
                escaped = !escaped && c == '\\';
                quoted += 1;
                if quoted <= MAX_QUOTED_CHARS {
                    push_escaped(&mut out, c);
                } else if quoted == MAX_QUOTED_CHARS + 1 {
                    out.push('…');
                }
            }
            None => {
                if c == '"' || c == '`' {
                    open = Some(c);
                    quoted = 0;
                    escaped = false;
                    out.push(c);
                } else {
                    push_escaped(&mut out, c);
                }
            }
        }
    }
    // An unclosed quote can hide a whole file behind its last cut: bound the line as well.
    const MAX_MESSAGE_CHARS: usize = 4 * 1024;
    if out.chars().count() > MAX_MESSAGE_CHARS {
        out = out.chars().take(MAX_MESSAGE_CHARS).collect();
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depth_counts_brackets_indentation_and_dashes() {
        let deep_flow = format!("a: {}{}\n", "[".repeat(100), "]".repeat(100));
        assert!(check_depth("x", &deep_flow).is_err());
        let deep_map = format!("{}1{}\n", "{a: ".repeat(100), "}".repeat(100));
        assert!(check_depth("x", &deep_map).is_err());
        let mut block = String::new();
        for level in 0..100 {
            block.push_str(&" ".repeat(level));
            block.push_str("a:\n");
        }
        assert!(check_depth("x", &block).is_err());
        let dashes = format!("{}1\n", "- ".repeat(100));
        assert!(check_depth("x", &dashes).is_err());
        // Brackets and quotes inside strings and comments do not count.
        let quoted = format!(
            "a: \"{}\" # {}\nb: '{}'\n",
            "[".repeat(100),
            "{".repeat(100),
            "[".repeat(100)
        );
        assert!(check_depth("x", &quoted).is_ok());
    }

    #[test]
    fn every_bundled_input_is_far_below_the_depth_limit() {
        for (name, text) in crate::specs::BUNDLED_MODELS
            .iter()
            .chain(crate::specs::BUNDLED_GPUS)
            .chain([&("runs", crate::validation::BUNDLED_PUBLISHED_RUNS)])
        {
            assert!(check_depth(name, text).is_ok(), "{name}");
        }
    }

    #[test]
    fn quotes_are_short_and_escaped() {
        assert_eq!(quote("a\u{1b}[31mb"), "a\\u{1b}[31mb");
        // Where a value starts and ends is plain: one with a space, or none, is put in quotes.
        assert_eq!(quote("plans/a.yaml"), "plans/a.yaml");
        assert_eq!(quote("x y"), "\"x y\"");
        assert_eq!(quote(""), "\"\"");
        assert_eq!(quote(" x"), "\" x\"");
        assert_eq!(quote("a\"b"), "\"a\\\"b\"");
        assert_eq!(quote("x\u{a0}y"), "\"x\\u{a0}y\"");
        assert_eq!(quote("x\u{200b}"), "x\\u{200b}");
        assert_eq!(escape("x y"), "x y");
        assert_eq!(
            quote(&"x".repeat(1000)).chars().count(),
            MAX_QUOTED_CHARS + 1
        );
        let message = format!(
            "invalid value: \"{}\u{7}\", expected u32",
            "y".repeat(10_000)
        );
        let clean = sanitize_message(&message);
        assert!(clean.len() < 200, "{clean}");
        assert!(clean.ends_with("\", expected u32"), "{clean}");
        assert!(!sanitize_message("a\nb\u{0}").contains(['\n', '\u{0}']));
    }
}
