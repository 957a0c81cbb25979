//! Event notes about field problems: `field: problem; field: problem`, at most 1 kB (the API
//! server's limit on an Event's note).

use super::FieldError;

/// The longest Event note, in bytes, before the ellipsis.
pub const NOTE_LIMIT: usize = 1000;

/// `field: problem; field: problem`, cut to [`NOTE_LIMIT`].
pub fn fields_note(problems: &[FieldError]) -> String {
    let text = problems
        .iter()
        .map(|p| format!("{}: {}", p.field, p.problem))
        .collect::<Vec<_>>()
        .join("; ");
    truncate_note(text)
}

/// Cuts a note to [`NOTE_LIMIT`] bytes on a character boundary, marking the cut with `…`.
pub fn truncate_note(mut text: String) -> String {
    if text.len() > NOTE_LIMIT {
        let mut cut = NOTE_LIMIT;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push('…');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_join_fields_and_cut_on_a_char_boundary() {
        let two = [
            FieldError::new("o", "spec.a", "first"),
            FieldError::new("o", "spec.b", "second"),
        ];
        assert_eq!(fields_note(&two), "spec.a: first; spec.b: second");
        let long = fields_note(&[FieldError::new("o", "spec.a", "é".repeat(800))]);
        assert!(long.ends_with('…'));
        assert!(long.len() <= NOTE_LIMIT + '…'.len_utf8());
    }
}
