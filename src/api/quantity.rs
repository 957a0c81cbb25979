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
    #[error("quantity {0:?} is too large (the largest is 2^63-1)")]
    Overflow(String),
    #[error("quantity {0:?} is too large in thousandths (the largest is 9223372036854775807m)")]
    MilliOverflow(String),
    #[error("quantity {0:?} has an exponent outside -{MAX_EXPONENT}..={MAX_EXPONENT}")]
    Exponent(String),
}

/// A non-negative Kubernetes quantity, exact to 10^-9.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Quantity {
    nanos: i128,
}

const NANO: i128 = 1_000_000_000;

impl Quantity {
    /// The zero quantity.
    pub const ZERO: Quantity = Quantity { nanos: 0 };

    /// Parses a quantity string; negative values are rejected (no resource amount is negative).
    pub fn parse(text: &str) -> Result<Quantity, QuantityError> {
        let nanos = parse_nanos(text)?;
        // Kubernetes caps quantities at 2^63-1 in magnitude.
        if nanos > i128::from(i64::MAX) * NANO {
            return Err(QuantityError::Overflow(text.to_string()));
        }
        Ok(Quantity { nanos })
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

    /// The value in units of 10^-9.
    pub fn nanos(self) -> i128 {
        self.nanos
    }

    /// `ceil(self / 10^(scale))` for scale in -9..=18, like Go's `Quantity.ScaledValue`.
    pub fn scaled_ceil(self, scale: i32) -> i64 {
        let shift = scale.saturating_add(9).clamp(0, 38) as u32;
        let div = 10i128.pow(shift);
        let v = (self.nanos + div - 1) / div;
        i64::try_from(v).unwrap_or(i64::MAX)
    }

    /// Millicores (or milli-units), rounded up; `None` past i64.
    pub fn checked_milli_ceil(self) -> Option<i64> {
        i64::try_from((self.nanos + 999_999) / 1_000_000).ok()
    }

    /// Millicores (or milli-units), rounded up.
    pub fn milli_ceil(self) -> i64 {
        self.scaled_ceil(-3)
    }

    /// Whole units (bytes, devices), rounded up, like Go's `Quantity.Value`.
    pub fn value_ceil(self) -> i64 {
        self.scaled_ceil(0)
    }

    /// Units of 10^6 (the original's "Mega" memory), rounded up.
    pub fn mega_ceil(self) -> i64 {
        self.scaled_ceil(6)
    }

    /// Exact comparison, like Go's `Quantity.Cmp`.
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

/// Largest magnitude of a written exponent (`1e-1000` to `1e1000`). Beyond it a quantity is an
/// error rather than rounded up to `1n` or overflowed: no such exponent is meant.
pub const MAX_EXPONENT: i64 = 1000;

/// A mantissa below this takes one more digit: `mantissa * 10 + 9` never overflows an i128.
const MANTISSA_LIMIT: i128 = i128::MAX / 100;

fn parse_nanos(text: &str) -> Result<i128, QuantityError> {
    let syntax = || QuantityError::Syntax(text.to_string());
    let overflow = || QuantityError::Overflow(text.to_string());
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
    // Mantissa: digits, an optional '.', more digits; at least one digit in all. The value read
    // is `(mantissa + dropped) * 10^shift`, `dropped` in [0, 1) and nonzero iff `inexact`.
    let mut mantissa: i128 = 0;
    let mut shift: i64 = 0;
    let mut inexact = false;
    let mut digits = 0usize;
    let mut seen_dot = false;
    while pos < bytes.len() {
        match bytes[pos] {
            d @ b'0'..=b'9' => {
                digits += 1;
                let d = i128::from(d - b'0');
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
            b'.' if !seen_dot => seen_dot = true,
            _ => break,
        }
        pos += 1;
    }
    if digits == 0 {
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
    if negative && (mantissa != 0 || inexact) {
        return Err(QuantityError::Negative(text.to_string()));
    }
    // In nanos: (mantissa + dropped) * 2^pow2 * 10^exp10, rounded up.
    let value = mantissa
        .checked_mul(1i128.checked_shl(pow2).ok_or_else(overflow)?)
        .ok_or_else(overflow)?;
    let exp10 = shift.saturating_add(pow10).saturating_add(9);
    if exp10 >= 0 {
        if value == 0 && !inexact {
            return Ok(0);
        }
        // A dropped digit means the mantissa reached MANTISSA_LIMIT: far above the largest value.
        if inexact {
            return Err(overflow());
        }
        let mul = u32::try_from(exp10)
            .ok()
            .and_then(|e| 10i128.checked_pow(e))
            .ok_or_else(overflow)?;
        return value.checked_mul(mul).ok_or_else(overflow);
    }
    if value == 0 && !inexact {
        return Ok(0);
    }
    let div = match u32::try_from(exp10.unsigned_abs())
        .ok()
        .and_then(|e| 10i128.checked_pow(e))
    {
        Some(div) => div,
        // Above 10^38 the divisor exceeds any mantissa: less than a nano, rounds up to 1n.
        None => return Ok(1),
    };
    // ceil((value + dropped) / div): with a dropped fraction, never a whole multiple of div.
    Ok(if inexact {
        value / div + 1
    } else {
        (value + div - 1) / div
    })
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
        assert!(matches!(
            Quantity::parse("1e999"),
            Err(QuantityError::Overflow(_))
        ));
        assert!(matches!(
            Quantity::parse("9999999999E"),
            Err(QuantityError::Overflow(_))
        ));
    }

    #[test]
    fn overflowing_exponents_and_suffixes_are_errors() {
        let exponent = |s: &str| matches!(Quantity::parse(s), Err(QuantityError::Exponent(_)));
        let overflow = |s: &str| matches!(Quantity::parse(s), Err(QuantityError::Overflow(_)));
        assert!(exponent("1e2147483647"));
        assert!(exponent("1e-2147483648"));
        assert!(exponent("1.5e-2147483648"));
        assert!(exponent("1e99999999999999999999"));
        assert!(exponent("0e1001"));
        assert!(exponent("1E-1001"));
        assert!(overflow("9999999999999999999Ei"));
        assert!(overflow("8Ei"));
        assert!(overflow("9223372036854775808"));
        assert!(overflow("9223372036854775807.000000001"));
        assert!(overflow(&"9".repeat(40)));
        assert!(overflow(&format!("{}.5", "1".repeat(5000))));
        assert!(overflow("1e1000"));
        let message = Quantity::parse("1e2147483647").unwrap_err().to_string();
        assert!(message.contains("1e2147483647") && message.contains("exponent"));
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
