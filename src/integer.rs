//! Whole-number arithmetic the cost model, the plan checks and the messages share.

/// Greatest common divisor (Euclid's algorithm); gcd(a, 0) = a.
pub fn gcd(a: u64, b: u64) -> u64 {
    let (mut a, mut b) = (a, b);
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

#[cfg(test)]
mod tests {
    #[test]
    fn gcd_of_common_pairs() {
        assert_eq!(super::gcd(12, 18), 6);
        assert_eq!(super::gcd(7, 0), 7);
        assert_eq!(super::gcd(8, 3), 1);
    }
}
