//! Exact parsing of Kubernetes quantity strings (`500m`, `1.5`, `1Gi`, `1e3`, `2E`).
//!
//! A quantity is held in nano units (10^-9), the finest precision Kubernetes keeps: values with
//! more fractional digits round up to the next nano, as `resource.ParseQuantity` does.

use std::cmp::Ordering;
use std::fmt;

/// Why a quantity string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    #[error("empty quantity")]
    Empty,
    #[error(
        "quantity {0:?} is not a number with an optional suffix (m, k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, Ei, or an exponent like e3)"
    )]
    Syntax(String),
    #[error("quantity {0:?} has an unknown suffix")]
    UnknownSuffix(String),
    #[error("quantity {0:?} is negative")]
    Negative(String),
    #[error(
        "quantity {0:?} has an exponent outside -{MAX_EXPONENT}..={MAX_EXPONENT} (the API server reads it as a 32-bit number)"
    )]
    Exponent(String),
}

/// A non-negative Kubernetes quantity, exact to 10^-9 up to [`Quantity::MAX`].
///
/// The API server takes a decimal quantity of any size (`1E`, `9999999999E`, `1e40`) and caps a
/// binary one (`8Ei`) at 2^63-1. Above `Quantity::MAX` (10^27 units) a quantity is held as
/// `Quantity::MAX`, so two such amounts compare equal: every amount the planner reads is an i64
/// (millicores, bytes, devices), which saturates far below it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Quantity {
    nanos: i128,
}

const NANO: i128 = 1_000_000_000;

/// The largest nanos a quantity holds: 10^27 units.
const MAX_NANOS: i128 = 10i128.pow(36);

/// The API server's cap on a binary-suffixed quantity (`Ki` to `Ei`): 2^63-1 units.
const BINARY_CAP_NANOS: i128 = i64::MAX as i128 * NANO;

impl Quantity {
    /// The zero quantity.
    pub const ZERO: Quantity = Quantity { nanos: 0 };

    /// The largest quantity held (10^27 units); larger ones saturate to it.
    pub const MAX: Quantity = Quantity { nanos: MAX_NANOS };

    /// Parses a quantity string; negative values are rejected (no resource amount is negative).
    /// A binary-suffixed value above 2^63-1 is capped there, as the API server caps it; any value
    /// above [`Quantity::MAX`] saturates to it.
    pub fn parse(text: &str) -> Result<Quantity, QuantityError> {
        Ok(Quantity {
            nanos: parse_nanos(text)?,
        })
    }

    /// A quantity of whole units.
    pub fn from_units(units: i64) -> Quantity {
        Quantity {
            nanos: i128::from(units) * NANO,
        }
    }

    /// A quantity of thousandths (millicores).
    pub fn from_milli(milli: i64) -> Quantity {
        Quantity {
            nanos: i128::from(milli) * 1_000_000,
        }
    }

    /// Whether the quantity is a whole number of units.
    pub fn is_whole(self) -> bool {
        self.nanos % NANO == 0
    }

    /// The value in units of 10^-9 (at most 10^36).
    pub fn nanos(self) -> i128 {
        self.nanos
    }

    /// `ceil(self / 10^(scale))` for scale in -9..=18, like Go's `Quantity.ScaledValue`, but
    /// saturating at `i64::MAX` where Go's overflows.
    pub fn scaled_ceil(self, scale: i32) -> i64 {
        let shift = scale.saturating_add(9).clamp(0, 38) as u32;
        let div = 10i128.pow(shift);
        let v = self.nanos / div + i128::from(self.nanos % div != 0);
        i64::try_from(v).unwrap_or(i64::MAX)
    }

    /// Millicores (or milli-units), rounded up; `None` past i64.
    pub fn checked_milli_ceil(self) -> Option<i64> {
        i64::try_from(self.nanos / 1_000_000 + i128::from(self.nanos % 1_000_000 != 0)).ok()
    }

    /// Millicores (or milli-units), rounded up, saturating at `i64::MAX` (past 9.2e15 units).
    pub fn milli_ceil(self) -> i64 {
        self.scaled_ceil(-3)
    }

    /// Whole units (bytes, devices), rounded up like Go's `Quantity.Value`, saturating at
    /// `i64::MAX`.
    pub fn value_ceil(self) -> i64 {
        self.scaled_ceil(0)
    }

    /// Units of 10^6 (the original's "Mega" memory), rounded up.
    pub fn mega_ceil(self) -> i64 {
        self.scaled_ceil(6)
    }

    /// Exact comparison, like Go's `Quantity.Cmp` (up to [`Quantity::MAX`]).
    pub fn cmp_exact(self, other: Quantity) -> Ordering {
        self.nanos.cmp(&other.nanos)
    }
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.nanos % NANO == 0 {
            write!(f, "{}", self.nanos / NANO)
        } else if self.nanos % 1_000_000 == 0 {
            write!(f, "{}m", self.nanos / 1_000_000)
        } else {
            write!(f, "{}n", self.nanos)
        }
    }
}

/// The multiplier a suffix stands for, as (power of ten, power of two).
fn suffix_scale(suffix: &str) -> Option<(i32, u32)> {
    Some(match suffix {
        "" => (0, 0),
        "n" => (-9, 0),
        "u" => (-6, 0),
        "m" => (-3, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        "Ki" => (0, 10),
        "Mi" => (0, 20),
        "Gi" => (0, 30),
        "Ti" => (0, 40),
        "Pi" => (0, 50),
        "Ei" => (0, 60),
        _ => return None,
    })
}

/// Largest magnitude of a written exponent: the API server converts it to an int32 (a larger one
/// wraps around there; here it is an error). Any exponent within saturates or rounds up to `1n`.
pub const MAX_EXPONENT: i64 = i32::MAX as i64;

/// A mantissa below this takes one more digit: `mantissa * 10 + 9` never overflows an i128.
const MANTISSA_LIMIT: i128 = i128::MAX / 100;

fn parse_nanos(text: &str) -> Result<i128, QuantityError> {
    let syntax = || QuantityError::Syntax(text.to_string());
    if text.is_empty() {
        return Err(QuantityError::Empty);
    }
    let bytes = text.as_bytes();
    let mut pos = 0;
    let mut negative = false;
    if matches!(bytes[0], b'+' | b'-') {
        negative = bytes[0] == b'-';
        pos = 1;
    }
    // The number: digits, an optional '.', more digits; at least one digit in all.
    let start = pos;
    let mut seen_dot = false;
    while pos < bytes.len() {
        match bytes[pos] {
            b'0'..=b'9' => {}
            b'.' if !seen_dot => seen_dot = true,
            _ => break,
        }
        pos += 1;
    }
    let number = &bytes[start..pos];
    if !number.iter().any(u8::is_ascii_digit) {
        return Err(syntax());
    }
    let rest = &text[pos..];
    let (pow10, pow2) = if let Some(exp) = rest.strip_prefix(['e', 'E']).filter(|e| {
        let e = e.strip_prefix(['+', '-']).unwrap_or(e);
        !e.is_empty() && e.bytes().all(|b| b.is_ascii_digit())
    }) {
        match exp.parse::<i64>() {
            Ok(exp) if (-MAX_EXPONENT..=MAX_EXPONENT).contains(&exp) => (exp, 0),
            _ => return Err(QuantityError::Exponent(text.to_string())),
        }
    } else {
        match suffix_scale(rest) {
            Some((pow10, pow2)) => (i64::from(pow10), pow2),
            None if rest.bytes().all(|b| b.is_ascii_alphabetic()) => {
                return Err(QuantityError::UnknownSuffix(text.to_string()));
            }
            None => return Err(syntax()),
        }
    };
    if negative && number.iter().any(|b| matches!(b, b'1'..=b'9')) {
        return Err(QuantityError::Negative(text.to_string()));
    }
    if pow2 == 0 {
        return Ok(decimal_nanos(number.iter().copied(), pow10));
    }
    // A binary suffix: the number times 2^pow2, exactly, as decimal digits; capped like Go's.
    let scaled = times_power_of_two(number, pow2);
    Ok(decimal_nanos(scaled.iter().copied(), 0).min(BINARY_CAP_NANOS))
}

/// `number` (decimal digits with at most one '.') times 2^pow2, as decimal digits with the '.'
/// in place: long multiplication from the last digit (the carry stays below 2^pow2).
fn times_power_of_two(number: &[u8], pow2: u32) -> Vec<u8> {
    let factor = 1u128 << pow2;
    let mut out = Vec::with_capacity(number.len() + 20);
    let mut carry = 0u128;
    for &b in number.iter().rev() {
        if b == b'.' {
            out.push(b'.');
            continue;
        }
        let t = u128::from(b - b'0') * factor + carry;
        out.push(b'0' + (t % 10) as u8);
        carry = t / 10;
    }
    while carry > 0 {
        out.push(b'0' + (carry % 10) as u8);
        carry /= 10;
    }
    out.reverse();
    out
}

/// The nanos of `number` (decimal digits with at most one '.') times 10^pow10, rounded up to the
/// next nano, saturating at [`MAX_NANOS`].
fn decimal_nanos(number: impl Iterator<Item = u8>, pow10: i64) -> i128 {
    // The value read is `(mantissa + dropped) * 10^shift`, `dropped` in [0, 1) and nonzero iff
    // `inexact`.
    let mut mantissa: i128 = 0;
    let mut shift: i64 = 0;
    let mut inexact = false;
    let mut seen_dot = false;
    for b in number {
        if b == b'.' {
            seen_dot = true;
            continue;
        }
        let d = i128::from(b - b'0');
        if mantissa == 0 && d == 0 && !seen_dot {
            // leading zeros add nothing
        } else if mantissa < MANTISSA_LIMIT {
            mantissa = mantissa * 10 + d;
            if seen_dot {
                shift = shift.saturating_sub(1);
            }
        } else {
            // Past i128 precision: an integer digit still scales the value up.
            if !seen_dot {
                shift = shift.saturating_add(1);
            }
            inexact |= d != 0;
        }
    }
    if mantissa == 0 && !inexact {
        return 0;
    }
    // In nanos: (mantissa + dropped) * 10^exp10, rounded up.
    let exp10 = shift.saturating_add(pow10).saturating_add(9);
    if exp10 >= 0 {
        // A dropped digit means the mantissa reached MANTISSA_LIMIT, above MAX_NANOS.
        if inexact {
            return MAX_NANOS;
        }
        return u32::try_from(exp10)
            .ok()
            .and_then(|e| 10i128.checked_pow(e))
            .and_then(|mul| mantissa.checked_mul(mul))
            .map_or(MAX_NANOS, |v| v.min(MAX_NANOS));
    }
    let Some(div) = u32::try_from(exp10.unsigned_abs())
        .ok()
        .and_then(|e| 10i128.checked_pow(e))
    else {
        // Above 10^38 the divisor exceeds any mantissa: less than a nano, rounds up to 1n.
        return 1;
    };
    // ceil((mantissa + dropped) / div): with a dropped fraction, never a whole multiple of div.
    let nanos = if inexact {
        mantissa / div + 1
    } else {
        mantissa / div + i128::from(mantissa % div != 0)
    };
    nanos.min(MAX_NANOS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap()
    }

    #[test]
    fn decimal_and_binary_suffixes() {
        assert_eq!(q("500m").milli_ceil(), 500);
        assert_eq!(q("1.5").milli_ceil(), 1500);
        assert_eq!(q("2").milli_ceil(), 2000);
        assert_eq!(q("1Gi").value_ceil(), 1 << 30);
        assert_eq!(q("1G").value_ceil(), 1_000_000_000);
        assert_eq!(q("1e3").value_ceil(), 1000);
        assert_eq!(q("1.5Ki").value_ceil(), 1536);
        assert_eq!(q("768Gi").value_ceil(), 768 << 30);
        assert_eq!(q("2E").value_ceil(), 2_000_000_000_000_000_000);
        assert_eq!(q("7Ei").value_ceil(), 7 << 60);
        assert_eq!(q("0.1m").milli_ceil(), 1);
        assert_eq!(q("+3").value_ceil(), 3);
        assert_eq!(q("-0").value_ceil(), 0);
        assert_eq!(q(".5").milli_ceil(), 500);
        assert_eq!(q("5.").milli_ceil(), 5000);
        assert_eq!(q("1E3").value_ceil(), 1000);
        assert_eq!(q("1e-3").milli_ceil(), 1);
    }

    #[test]
    fn original_rounding() {
        // edl-autoscaler.md §2.3: 100Mi → 105 Mega, "1" byte → 1 Mega.
        assert_eq!(q("100Mi").mega_ceil(), 105);
        assert_eq!(q("1").mega_ceil(), 1);
        assert_eq!(q("250m").value_ceil(), 1);
    }

    #[test]
    fn garbage_is_rejected() {
        assert!(matches!(
            Quantity::parse("12Qi"),
            Err(QuantityError::UnknownSuffix(_))
        ));
        assert!(matches!(
            Quantity::parse("-1"),
            Err(QuantityError::Negative(_))
        ));
        assert!(matches!(
            Quantity::parse("1.2.3"),
            Err(QuantityError::Syntax(_))
        ));
        assert!(matches!(Quantity::parse(""), Err(QuantityError::Empty)));
        assert!(matches!(
            Quantity::parse("Gi"),
            Err(QuantityError::Syntax(_))
        ));
        assert!(matches!(
            Quantity::parse("1 Gi"),
            Err(QuantityError::Syntax(_))
        ));
        assert!(matches!(
            Quantity::parse("1e"),
            Err(QuantityError::UnknownSuffix(_))
        ));
    }

    #[test]
    fn large_values_are_taken_as_the_api_server_takes_them() {
        let max = |s: &str| Quantity::parse(s) == Ok(Quantity::MAX);
        // Decimal: any size (Go keeps an inf.Dec); held exactly up to 10^27 units, then saturated.
        assert_eq!(q("1E").nanos(), 10i128.pow(27));
        assert_eq!(q("1E").milli_ceil(), i64::MAX);
        assert_eq!(q("1E").value_ceil(), 1_000_000_000_000_000_000);
        assert_eq!(
            q("9223372036854775808").nanos(),
            9_223_372_036_854_775_808 * NANO
        );
        assert_eq!(q("9223372036854775808").value_ceil(), i64::MAX);
        assert_eq!(q("1000000000E"), Quantity::MAX);
        assert_eq!(q(&"9".repeat(27)).nanos(), MAX_NANOS - NANO);
        for huge in [
            "9999999999E",
            "1e999",
            "1e1000",
            "1e2147483647",
            "1.5e1001",
            &"9".repeat(40),
            &format!("{}.5", "1".repeat(5000)),
        ] {
            assert!(max(huge), "{huge}");
        }
        assert_eq!(q("0e2147483647"), Quantity::ZERO);
        assert_eq!(q("1e-2147483647").nanos(), 1);
        // Binary: capped at 2^63-1 units, as ParseQuantity caps a BinarySI amount.
        let cap = i128::from(i64::MAX) * NANO;
        for capped in [
            "8Ei",
            "9999999999999999999Ei",
            &format!("1{}Ki", "0".repeat(50)),
        ] {
            assert_eq!(q(capped).nanos(), cap, "{capped}");
        }
        assert_eq!(q("9999999999999999999Ei").value_ceil(), i64::MAX);
        assert_eq!(q("7.5Ei").nanos(), (15i128 << 59) * NANO);
        // A binary fraction is exact however many digits it has (long multiplication by 2^k).
        let long = format!("1.{}1Ki", "0".repeat(60));
        assert_eq!(q(&long).nanos(), 1024 * NANO + 1);
        assert_eq!(q("0.000000000001Ki").nanos(), 2);
        assert_eq!(q("0.0000000000001Ei").nanos(), 115_292_150_460_685);
        // Saturated amounts read as i64s saturate too, and print and parse back.
        let m = Quantity::MAX;
        assert_eq!(
            (m.milli_ceil(), m.value_ceil(), m.mega_ceil()),
            (i64::MAX, i64::MAX, i64::MAX)
        );
        assert_eq!(m.checked_milli_ceil(), None);
        assert_eq!(Quantity::parse(&m.to_string()), Ok(m));
    }

    #[test]
    fn exponents_past_32_bits_are_errors() {
        let exponent = |s: &str| matches!(Quantity::parse(s), Err(QuantityError::Exponent(_)));
        assert!(exponent("1e2147483648"));
        assert!(exponent("1e-2147483648"));
        assert!(exponent("1.5e-2147483648"));
        assert!(exponent("1e99999999999999999999"));
        assert!(exponent("0e4294967296"));
        assert!(!exponent("1E-2147483647"));
        let message = Quantity::parse("1e2147483648").unwrap_err().to_string();
        assert!(message.contains("1e2147483648") && message.contains("exponent"));
    }

    #[test]
    fn extremes_that_fit_are_exact() {
        assert_eq!(q("9223372036854775807").value_ceil(), i64::MAX);
        assert_eq!(q("7Ei").value_ceil(), 7 << 60);
        assert_eq!(q("1e-1000").nanos(), 1);
        assert_eq!(q("0e1000").nanos(), 0);
        assert_eq!(q("1e-9").nanos(), 1);
        assert_eq!(q("1e-10").nanos(), 1);
        // Many digits: the value is kept exactly, and a dropped nonzero digit still rounds up.
        let many = format!("1.{}", "0".repeat(60));
        assert_eq!(q(&many).nanos(), NANO);
        assert_eq!(q(&format!("{many}1")).nanos(), NANO + 1);
        let long_int = format!("1{}e-40", "0".repeat(40));
        assert_eq!(q(&long_int).nanos(), NANO);
        assert_eq!(q(&format!("{}e-40", "1".repeat(41))).nanos(), 1_111_111_112);
        assert_eq!(q(&format!("0.{}1", "0".repeat(100_000))).nanos(), 1);
        assert!(matches!(
            Quantity::parse(&format!("-0.{}1", "0".repeat(100))),
            Err(QuantityError::Negative(_))
        ));
    }

    #[test]
    fn exact_comparison() {
        assert_eq!(q("2").cmp_exact(q("1")), Ordering::Greater);
        assert_eq!(q("1000m").cmp_exact(q("1")), Ordering::Equal);
        assert_eq!(q("1Ki").cmp_exact(q("1k")), Ordering::Greater);
    }
}
