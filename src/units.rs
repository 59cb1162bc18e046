//! Physical quantities as newtypes, and parsing of the sizes users type.
//!
//! `Bytes / BytesPerSec = Seconds` and `Flops / FlopsPerSec = Seconds` compile; adding bytes to seconds
//! does not. GB = 1e9 bytes and GiB = 2^30 bytes, never mixed silently (STYLE.md rule 9).

use serde::{Deserialize, Serialize};
use std::ops::{Add, AddAssign, Div, Mul, Sub};

pub const GB: f64 = 1e9;
pub const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

macro_rules! quantity {
    ($name:ident, $doc:literal) => {
        #[doc = $doc]
        #[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub f64);

        impl Add for $name {
            type Output = $name;
            fn add(self, rhs: $name) -> $name {
                $name(self.0 + rhs.0)
            }
        }
        impl AddAssign for $name {
            fn add_assign(&mut self, rhs: $name) {
                self.0 += rhs.0;
            }
        }
        impl Sub for $name {
            type Output = $name;
            fn sub(self, rhs: $name) -> $name {
                $name(self.0 - rhs.0)
            }
        }
        impl Mul<f64> for $name {
            type Output = $name;
            fn mul(self, rhs: f64) -> $name {
                $name(self.0 * rhs)
            }
        }
        impl Div<f64> for $name {
            type Output = $name;
            fn div(self, rhs: f64) -> $name {
                $name(self.0 / rhs)
            }
        }
        impl std::iter::Sum for $name {
            fn sum<I: Iterator<Item = $name>>(iter: I) -> $name {
                $name(iter.map(|q| q.0).sum())
            }
        }
        impl $name {
            pub const ZERO: $name = $name(0.0);
            pub fn max(self, other: $name) -> $name {
                $name(self.0.max(other.0))
            }
            pub fn min(self, other: $name) -> $name {
                $name(self.0.min(other.0))
            }
        }
    };
}

quantity!(
    Bytes,
    "A number of bytes (f64 so that per-GPU shares of a tensor stay exact enough)."
);
quantity!(Seconds, "A duration in seconds.");
quantity!(
    Flops,
    "A count of floating-point operations (a multiply-add is 2)."
);
quantity!(FlopsPerSec, "A rate of floating-point operations.");
quantity!(BytesPerSec, "A bandwidth in bytes per second.");

impl Div<BytesPerSec> for Bytes {
    type Output = Seconds;
    fn div(self, rhs: BytesPerSec) -> Seconds {
        Seconds(self.0 / rhs.0)
    }
}
impl Div<FlopsPerSec> for Flops {
    type Output = Seconds;
    fn div(self, rhs: FlopsPerSec) -> Seconds {
        Seconds(self.0 / rhs.0)
    }
}
impl Div<Seconds> for Flops {
    type Output = FlopsPerSec;
    fn div(self, rhs: Seconds) -> FlopsPerSec {
        FlopsPerSec(self.0 / rhs.0)
    }
}

/// The GiB left between `total_bytes` and `capacity_bytes` as the two print to 0.1 GiB: the
/// difference of the printed numbers, so "X of Y GiB, Z free" always adds up (negative: missed
/// by). Rounding each number alone can leave the printed parts 0.1 apart.
pub fn shown_gib_left(capacity_bytes: f64, total_bytes: f64) -> f64 {
    (gib_tenths(capacity_bytes) - gib_tenths(total_bytes)) / 10.0
}

/// `a_bytes` − `b_bytes` in GiB as the two print to 0.1 GiB: the difference of the printed numbers,
/// so a sentence beside a table (`compare`'s verdict: "needs 5.3 GiB less") reads what its rows'
/// subtraction gives (61.8 and 67.1 GiB), not the 5.2 of the unrounded values.
pub fn shown_gib_difference(a_bytes: f64, b_bytes: f64) -> f64 {
    (gib_tenths(a_bytes) - gib_tenths(b_bytes)) / 10.0
}

/// Bytes as the whole tenths of a GiB they print as.
fn gib_tenths(bytes: f64) -> f64 {
    (bytes / GIB * 10.0).round()
}

/// Parts of a total (`parts_bytes`, bytes) in GiB to 0.1 GiB, so that they add up to the total
/// as it prints to 0.1 GiB: every part but the last rounded alone, as it prints anywhere else (the
/// same bytes print the same in every row and every plan), and the last part (the breakdown's
/// "other", the rest of the total) taking the difference of the printed total and those. Rounding
/// each part alone can leave the printed parts 0.1-0.2 GiB from the printed total; giving the
/// missing tenths to the largest remainders printed equal parts apart (14.9 GiB of gradients
/// beside 15.0 GiB of weights of the same bytes). The last part is clamped at 0 in case a caller's
/// last part is smaller than the rounding (tpsim's "other" holds at least 2 GiB).
pub fn shown_gib_parts(parts_bytes: &[f64], total_bytes: f64) -> Vec<f64> {
    let Some((_, named)) = parts_bytes.split_last() else {
        return Vec::new();
    };
    let mut shown: Vec<f64> = named.iter().map(|&b| gib_tenths(b)).collect();
    let rest = gib_tenths(total_bytes) - shown.iter().sum::<f64>();
    shown.push(rest.max(0.0));
    shown.iter().map(|t| t / 10.0).collect()
}

impl Bytes {
    pub fn gib(self) -> f64 {
        self.0 / GIB
    }
    pub fn gb(self) -> f64 {
        self.0 / GB
    }
}

/// Why a count such as `512B` could not be read; the text is shown as [`crate::input_file::quote`]
/// shows user input (`--params 7x`, `--params ""`, `--params "7 B"`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{flag} {} {rule}", crate::input_file::quote(.original))]
pub struct ParseCountError {
    pub flag: &'static str,
    pub original: String,
    pub rule: String,
}

/// The rule a size with a space inside breaks: `7 B` or `7B 13B` could be one value or two, so
/// neither is guessed at (spaces around it, as a shell quote leaves them, are harmless and trimmed).
pub const INNER_SPACE_RULE: &str = "has a space inside, so it could be one value or two; write one value, its unit joined to the number";

/// One item of a comma-separated list, as every list flag reads it (`sweep --values "7B, 13B"`,
/// `calibrate --sweep "64, 128"`, `--recompute-modules "core_attn, mlp"`): the spaces around the
/// item are no part of it. The one rule, so that no list takes spaces another refuses.
pub fn list_item(item: &str) -> &str {
    item.trim()
}

/// `+8`, `007`, `-0`: a whole number written with a sign or leading zeros, which Rust's parsers
/// (and YAML's, for `+8`) read as 8, 7 and 0 without a word, so the value echoed back is not the
/// one typed. `Some` is the plain digits to write instead; `None` for plain digits, a negative
/// number (refused as negative where it is read) and anything that is not a whole number.
pub fn plain_digits_for(text: &str) -> Option<String> {
    let (signed, digits) = match text.strip_prefix(['+', '-']) {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let plain = match digits.trim_start_matches('0') {
        "" => "0",
        rest => rest,
    };
    if text.starts_with('-') && plain != "0" {
        return None;
    }
    (signed || plain.len() != digits.len()).then(|| plain.to_string())
}

/// clap's value parser for a plain number flag (`--moe-imbalance 1.2`): Rust reads `nan`, `inf`
/// and `1e400` (as infinity) as numbers, and a later message would quote `NaN` or `inf`, which
/// the user did not type; they are refused here, where the text is still the user's.
pub fn parse_finite_f64(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(value) if value.is_finite() => Ok(value),
        Ok(_) => Err(
            "is not a finite number (nan, inf and numbers past 1.8e308 are refused); give a number such as 1.25".to_string(),
        ),
        Err(_) => Err("expected a number (digits with an optional decimal point or exponent), such as 1.25".to_string()),
    }
}

/// A list item parsed as `T` by [`list_item`]'s rule: clap's value parser for the flags that split
/// at commas (`value_delimiter = ','`), so `--sweep "64, 128"` reads as `--values "1, 2"` does.
pub fn parse_list_item<T: std::str::FromStr>(item: &str) -> Result<T, T::Err> {
    list_item(item).parse()
}

/// `text` without the spaces around it, refused (`Err` with [`INNER_SPACE_RULE`]) when a space
/// is left inside: every size parser reads one word.
pub fn one_word(text: &str) -> Result<&str, &'static str> {
    let trimmed = text.trim();
    if trimmed.contains(char::is_whitespace) {
        return Err(INNER_SPACE_RULE);
    }
    Ok(trimmed)
}

/// Parses a parameter count: `512B`, `1.5T`, `70000M`, `175e9`, `7.5b`, `350k`.
/// Suffixes are decimal (K=1e3, M=1e6, B/G=1e9, T=1e12), as model sizes are quoted in papers.
pub fn parse_count(flag: &'static str, text: &str) -> Result<f64, ParseCountError> {
    let fail = |rule: &str| ParseCountError {
        flag,
        original: text.to_string(),
        rule: rule.to_string(),
    };
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err(fail(
            "is empty; give a count such as 512B, 1.5T, 70000M or 175e9",
        ));
    }
    let trimmed = one_word(text).map_err(|rule| fail(&format!("{rule} (e.g. 512B, not 512 B)")))?;
    // Rust's float parser reads nan, inf and infinity, whose last letter is no suffix; YAML writes
    // them .nan and .inf (a plan file's `params: .nan`, YAML 1.2 §10.2.1.4), which Rust does not.
    if trimmed.parse::<f64>().is_ok_and(|v| !v.is_finite()) || is_yaml_non_finite(trimmed) {
        return Err(fail(
            "is not a finite number; give a count such as 512B, 1.5T, 70000M or 175e9",
        ));
    }
    let (number, multiplier) = match trimmed.chars().last() {
        Some(c) if c.is_ascii_alphabetic() && !trimmed.ends_with(['e', 'E']) => {
            let multiplier = match c.to_ascii_uppercase() {
                'K' => 1e3,
                'M' => 1e6,
                'B' | 'G' => 1e9,
                'T' => 1e12,
                _ => {
                    return Err(fail(
                        "has an unknown suffix; use K, M, B or T (e.g. 512B, 1.5T, 70000M) or a plain number like 175e9",
                    ));
                }
            };
            (&trimmed[..trimmed.len() - 1], multiplier)
        }
        _ => (trimmed, 1.0),
    };
    let value: f64 = number
        .trim()
        .parse()
        .map_err(|_| fail("is not a number; give a count such as 512B, 1.5T, 70000M or 175e9"))?;
    if !value.is_finite() {
        return Err(fail("is not finite; give a count such as 512B"));
    }
    if value <= 0.0 {
        return Err(fail("must be greater than zero; give a count such as 512B"));
    }
    Ok(value * multiplier)
}

/// YAML's words for a float that is not finite: `.nan`, `.inf`, `-.inf`, `+.inf` in any case
/// (YAML 1.2 core schema, §10.2.1.4), which Rust's float parser does not read.
fn is_yaml_non_finite(text: &str) -> bool {
    text.trim_start_matches(['+', '-'])
        .strip_prefix('.')
        .is_some_and(|word| word.eq_ignore_ascii_case("nan") || word.eq_ignore_ascii_case("inf"))
}

/// Formats a count the way it is usually quoted: 512.3B, 1.01T, 350M.
pub fn format_count(value: f64) -> String {
    if value >= 1e12 {
        format!("{:.2}T", value / 1e12)
    } else if value >= 1e9 {
        format!("{:.1}B", value / 1e9)
    } else if value >= 1e6 {
        format!("{:.0}M", value / 1e6)
    } else {
        format!("{value:.0}")
    }
}

/// A token budget the user gave (`--tokens`), in [`format_count`]'s units and at least its
/// decimals, with more where those would misstate it by over 0.5%: `--tokens 1.5M` reads "1.5M"
/// (format_count's whole millions said "2M"), `1.25B` "1.25B", `300B` still "300.0B".
pub fn format_token_count(value: f64) -> String {
    let (scaled, unit, least) = if value >= 1e12 {
        (value / 1e12, "T", 2)
    } else if value >= 1e9 {
        (value / 1e9, "B", 1)
    } else if value >= 1e6 {
        (value / 1e6, "M", 0)
    } else {
        (value, "", 0)
    };
    let mut places: usize = least;
    loop {
        let text = format!("{scaled:.places$}");
        let close = text
            .parse::<f64>()
            .is_ok_and(|back| (back - scaled).abs() <= scaled.abs() * 0.005);
        if close || places >= 6 {
            return format!("{text}{unit}");
        }
        places += 1;
    }
}

/// A count and its noun as English says it: "1 token", "2 tokens", "1.5M tokens" (the singular
/// only where the number reads exactly "1"); `--tokens 1` printed "train: 1 tokens".
pub fn count_words(count: impl std::fmt::Display, one: &str, many: &str) -> String {
    let count = count.to_string();
    if count == "1" {
        format!("1 {one}")
    } else {
        format!("{count} {many}")
    }
}

/// A token budget in words: [`format_token_count`]'s number and "token" or "tokens".
pub fn token_count_words(value: f64) -> String {
    count_words(format_token_count(value), "token", "tokens")
}

/// Tokens per step, in millions to one decimal (3.1M) down to 0.1M, thousands below it: a small
/// batch read "0.0M tokens".
pub fn tokens_in_words(tokens: f64) -> String {
    if tokens >= 0.1e6 {
        format!("{:.1}M", tokens / 1e6)
    } else if tokens >= 1e3 {
        format!("{:.1}K", tokens / 1e3)
    } else {
        format!("{tokens:.0}")
    }
}

/// A number the user typed, shown back in a message as short as it reads: plain decimals for
/// everyday sizes, an exponent for tiny or huge ones (`1e-300`, not 300 digits; `1.2e29`, not
/// 30), `NaN` and `inf` as such (`1e400` overflows to `inf` when read).
pub fn show_number(value: f64) -> String {
    let magnitude = value.abs();
    if !value.is_finite() || value == 0.0 || (1e-4..1e15).contains(&magnitude) {
        format!("{value}")
    } else {
        format!("{value:e}")
    }
}

/// A measured quantity printed with `decimals` places, or, where those would round a positive
/// value to zero (a slow CPU twin's 0.0003 TFLOP/s as "0.000"), with three significant digits: a
/// number tpsim accepts is never shown as nothing.
pub fn show_measured(value: f64, decimals: usize) -> String {
    let places = measured_places(value, decimals);
    format!("{value:.places$}")
}

/// The decimal places [`show_measured`] prints `value` with: `decimals`, or more where those
/// would round a positive value to zero.
pub fn measured_places(value: f64, decimals: usize) -> usize {
    let magnitude = value.abs();
    let shown_as_zero = magnitude < 0.5 * 10f64.powi(-(decimals as i32));
    if value == 0.0 || !value.is_finite() || !shown_as_zero {
        return decimals;
    }
    // Three significant digits: the first at 10^floor(log10 |v|).
    let first = magnitude.log10().floor() as i32;
    usize::try_from(2 - first).unwrap_or(0)
}

/// A search's wall time as every text output prints it (`plan`'s `search:` line, `sweep`'s
/// header, the README's Speed table): milliseconds, one decimal, whatever its size, so two
/// searches read in one unit. JSON says it in seconds (`search.elapsed_s`).
pub fn show_search_time(seconds: f64) -> String {
    format!("{:.1} ms", seconds * 1e3)
}

/// A step time in seconds as the tables and range lines print it: two decimals from 0.1 s up,
/// three significant digits below, so a small model's 12 ms step reads 0.0123, not 0.01 (and its
/// range not "0.01–0.01").
pub fn show_step_s(seconds: f64) -> String {
    if seconds >= 0.1 || seconds <= 0.0 || !seconds.is_finite() {
        return format!("{seconds:.2}");
    }
    let first = seconds.log10().floor() as i32;
    let places = usize::try_from(2 - first).unwrap_or(2);
    format!("{seconds:.places$}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_parts_add_up_to_the_printed_total() {
        // 7.46 + 14.99 + 11.22 + 38.08 + 3.85 = 75.6: rounded alone, 7.5 + 15.0 + 11.2 + 38.1 +
        // 3.8 or 3.9 = 75.6 or 75.7; the last part takes the rest, 75.6 - 71.8 = 3.8.
        let parts: Vec<f64> = [7.46, 14.99, 11.22, 38.08, 3.85]
            .iter()
            .map(|g| g * GIB)
            .collect();
        let total: f64 = parts.iter().sum();
        let shown = shown_gib_parts(&parts, total);
        let tenths: Vec<i64> = shown.iter().map(|g| (g * 10.0).round() as i64).collect();
        assert_eq!(tenths, [75, 150, 112, 381, 38]);
        assert_eq!(tenths.iter().sum::<i64>(), 756);
        // Equal parts print alike, whatever their remainders against the others.
        let twins = [
            14.957 * GIB,
            14.957 * GIB,
            5.6 * GIB,
            38.07 * GIB,
            3.9 * GIB,
        ];
        let shown = shown_gib_parts(&twins, twins.iter().sum());
        assert_eq!(shown[0], shown[1], "{shown:?}");
        // No parts, a zero total, a last part smaller than the rounding: no panic, nothing below 0.
        assert!(shown_gib_parts(&[], 0.0).is_empty());
        assert_eq!(shown_gib_parts(&[0.0, 0.0], 0.0), [0.0, 0.0]);
        assert_eq!(shown_gib_parts(&[0.06 * GIB, 0.0], 0.06 * GIB), [0.1, 0.0]);
    }

    #[test]
    fn search_times_read_in_milliseconds_at_any_size() {
        assert_eq!(show_search_time(0.0729), "72.9 ms");
        assert_eq!(show_search_time(1.5), "1500.0 ms");
    }

    #[test]
    fn step_seconds_keep_three_digits_below_a_tenth() {
        assert_eq!(show_step_s(72.374), "72.37");
        assert_eq!(show_step_s(0.1), "0.10");
        assert_eq!(show_step_s(0.012_34), "0.0123");
        assert_eq!(show_step_s(0.004_567), "0.00457");
        assert_eq!(show_step_s(0.0), "0.00");
    }

    #[test]
    fn measured_values_never_print_as_zero() {
        assert_eq!(show_measured(0.076, 3), "0.076");
        assert_eq!(show_measured(19.54, 1), "19.5");
        assert_eq!(show_measured(0.0003, 3), "0.000300");
        assert_eq!(show_measured(0.00001234, 3), "0.0000123");
        assert_eq!(show_measured(1e-9, 3), "0.00000000100");
        assert_eq!(show_measured(0.0004, 1), "0.000400");
        assert_eq!(show_measured(0.0, 3), "0.000");
        // Where the decimals show it, they are kept.
        assert_eq!(show_measured(0.0006, 3), "0.001");
    }

    #[test]
    fn numbers_shown_back_stay_short() {
        assert_eq!(show_number(1.25), "1.25");
        assert_eq!(show_number(-1.0), "-1");
        assert_eq!(show_number(1e-300), "1e-300");
        assert_eq!(show_number(1.2345e29), "1.2345e29");
        assert_eq!(show_number(f64::NAN), "NaN");
        assert_eq!(show_number(f64::INFINITY), "inf");
    }

    #[test]
    fn parses_the_forms_users_type() {
        assert_eq!(parse_count("--params", "512B").unwrap(), 512e9);
        assert_eq!(parse_count("--params", "1.5T").unwrap(), 1.5e12);
        assert_eq!(parse_count("--params", "70000M").unwrap(), 70e9);
        assert_eq!(parse_count("--params", "175e9").unwrap(), 175e9);
        assert_eq!(parse_count("--params", "7.5b").unwrap(), 7.5e9);
    }

    #[test]
    fn rejects_bad_counts_with_the_rule() {
        for bad in ["abc", "-5B", "0", "", "5X", "nan", "1e400"] {
            let err = parse_count("--params", bad).unwrap_err();
            assert!(err.to_string().contains("--params"), "{err}");
        }
        for two in ["7 B", "7B 13B", "7\tB", "1 000", "7.5 T"] {
            let err = parse_count("--params", two).unwrap_err();
            assert!(err.rule.starts_with(INNER_SPACE_RULE), "{two}");
        }
        // The value is shown as every error shows one: in quotes only when empty or spaced.
        assert!(
            parse_count("--params", "7x")
                .unwrap_err()
                .to_string()
                .starts_with("--params 7x has an unknown suffix")
        );
        assert!(
            parse_count("--params", "")
                .unwrap_err()
                .to_string()
                .starts_with("--params \"\" is empty")
        );
        // Spaces a shell quote leaves around one value are no second value.
        assert_eq!(parse_count("--params", " 7B ").unwrap(), 7e9);
        assert!(
            parse_count("--params", "-5B")
                .unwrap_err()
                .rule
                .contains("greater than zero")
        );
    }

    #[test]
    fn division_gives_time() {
        let t = Bytes(100.0 * GB) / BytesPerSec(50.0 * GB);
        assert_eq!(t, Seconds(2.0));
        let t = Flops(312e12) / FlopsPerSec(312e12);
        assert_eq!(t, Seconds(1.0));
    }
}
