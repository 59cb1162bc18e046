//! The valid values a message offers: [`divisors`] of a count and the list that prints them.

pub fn divisors(n: u32) -> Vec<u32> {
    (1..=n).filter(|d| n.is_multiple_of(*d)).collect()
}

pub(super) fn list(values: impl IntoIterator<Item = u32>) -> String {
    let items: Vec<String> = values.into_iter().map(|v| v.to_string()).collect();
    if items.len() > 16 {
        format!(
            "{}, ..., {}",
            items[..12].join(", "),
            items[items.len() - 2..].join(", ")
        )
    } else {
        items.join(", ")
    }
}
