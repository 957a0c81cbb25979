//! Property tests of the quantity parser: any string parses or fails without panicking, valid
//! quantities round-trip through their formatting, and exact values match an i128 reference.

use proptest::prelude::*;
use trainscale::api::{Quantity, QuantityError};

/// Largest value in nanos (10^27 units): larger ones saturate to it.
const MAX_NANOS: i128 = 10i128.pow(36);

/// The API server's cap on a binary-suffixed value, in nanos (2^63-1 units).
const BINARY_CAP: i128 = i64::MAX as i128 * 1_000_000_000;

/// Strings shaped like quantities, with extreme exponents and long digit runs.
fn quantity_like() -> impl Strategy<Value = String> {
    (
        prop::sample::select(vec!["", "+", "-"]),
        "[0-9]{0,45}",
        prop::option::of("[0-9]{0,45}"),
        prop_oneof![
            prop::sample::select(vec![
                "", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi",
                "Ei", "e", "E+", "Qi", "i", " ",
            ])
            .prop_map(str::to_string),
            (
                prop::sample::select(vec!["e", "E", "e+", "e-", "E-"]),
                prop_oneof![
                    -2000i64..2000,
                    Just(i64::from(i32::MAX)),
                    Just(i64::from(i32::MIN)),
                    Just(i64::MAX),
                    Just(i64::MIN),
                ]
            )
                .prop_map(|(e, n)| format!("{e}{n}")),
        ],
    )
        .prop_map(|(sign, int, frac, suffix)| match frac {
            Some(frac) => format!("{sign}{int}.{frac}{suffix}"),
            None => format!("{sign}{int}{suffix}"),
        })
}

/// Checks the invariants of a parse result: a valid quantity is non-negative, at most 10^27
/// units, and round-trips through `Display`.
fn check(text: &str) -> Result<(), TestCaseError> {
    if let Ok(q) = Quantity::parse(text) {
        prop_assert!((0..=MAX_NANOS).contains(&q.nanos()), "{text}: {q:?}");
        let shown = q.to_string();
        prop_assert_eq!(
            Quantity::parse(&shown),
            Ok(q),
            "{} shown as {}",
            text,
            shown
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn any_string_parses_or_fails_without_panic(text in any::<String>()) {
        check(&text)?;
    }

    #[test]
    fn quantity_like_strings_parse_or_fail_without_panic(text in quantity_like()) {
        check(&text)?;
    }

    #[test]
    fn valid_quantities_round_trip(nanos in 0..=MAX_NANOS) {
        let q = Quantity::parse(&format!("{nanos}n")).unwrap();
        prop_assert_eq!(q.nanos(), nanos);
        prop_assert_eq!(Quantity::parse(&q.to_string()), Ok(q));
    }

    /// An integer times a suffix or exponent is exact when it fits, else saturated (a decimal
    /// one) or capped at 2^63-1 units (a binary one, as the API server caps it).
    #[test]
    fn integer_with_scale_matches_i128(
        m in prop_oneof![0i128..1000, 0i128..=i128::from(u64::MAX), Just(9_999_999_999_999_999_999)],
        k in 0usize..16,
    ) {
        let (suffix, scale) = [
            ("", 1i128), ("k", 1_000), ("M", 1_000_000), ("G", 1_000_000_000),
            ("T", 1_000_000_000_000), ("P", 1_000_000_000_000_000), ("E", 1_000_000_000_000_000_000),
            ("Ki", 1 << 10), ("Mi", 1 << 20), ("Gi", 1 << 30), ("Ti", 1 << 40), ("Pi", 1 << 50),
            ("Ei", 1 << 60), ("e0", 1), ("e9", 1_000_000_000), ("e18", 1_000_000_000_000_000_000),
        ][k];
        let text = format!("{m}{suffix}");
        let exact = m.checked_mul(scale).and_then(|v| v.checked_mul(1_000_000_000));
        let cap = if suffix.ends_with('i') { BINARY_CAP } else { MAX_NANOS };
        let expected = exact.map_or(cap, |v| v.min(cap));
        prop_assert_eq!(Quantity::parse(&text).map(Quantity::nanos), Ok(expected));
    }

    /// A fraction with a negative exponent rounds up to the next nano, however many digits.
    #[test]
    fn small_values_round_up_to_the_next_nano(digits in "[0-9]{1,60}", exp in 0i64..80) {
        let text = format!("0.{digits}e-{exp}");
        let q = Quantity::parse(&text).unwrap();
        // 0.<digits> * 10^-exp in nanos = digits * 10^(9 - exp - len).
        let shift = 9 - exp - digits.len() as i64;
        let all_zero = digits.bytes().all(|b| b == b'0');
        if all_zero {
            prop_assert_eq!(q.nanos(), 0);
        } else if shift >= 0 {
            let exact: i128 = digits.parse::<i128>().unwrap() * 10i128.pow(shift as u32);
            prop_assert_eq!(q.nanos(), exact);
        } else {
            // Keep the digits above the nano, round up on any digit below it.
            let cut = digits.len() as i64 + shift;
            let (high, low) = if cut > 0 { digits.split_at(cut as usize) } else { ("", digits.as_str()) };
            let high: i128 = if high.is_empty() { 0 } else { high.parse().unwrap() };
            let up = i128::from(low.bytes().any(|b| b != b'0'));
            prop_assert_eq!(q.nanos(), high + up, "{}", text);
        }
    }

    #[test]
    fn out_of_range_exponents_are_errors(
        m in 0u64..,
        exp in prop_oneof![i64::from(i32::MAX) + 1..=i64::MAX, i64::MIN..=i64::from(i32::MIN)],
    ) {
        let text = format!("{m}e{exp}");
        prop_assert_eq!(Quantity::parse(&text), Err(QuantityError::Exponent(text.clone())));
    }
}
