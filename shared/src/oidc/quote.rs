//! Outside values quoted back in errors, made short and printable.

/// Longest claim value quoted back in an error.
const MAX_QUOTED: usize = 64;

/// An outside value made safe to quote in an error: at most 64 characters, no control characters.
pub(super) fn quoted(s: &str) -> String {
    let mut out: String = s
        .chars()
        .take(MAX_QUOTED)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    if s.chars().nth(MAX_QUOTED).is_some() {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_quote_outside_values_briefly() {
        let long = format!("{}\n", "x".repeat(100));
        let q = quoted(&long);
        assert_eq!(q.chars().count(), MAX_QUOTED + 1);
        assert!(!q.contains('\n'));
        assert_eq!(quoted("a\u{7}b"), "a?b");
    }
}
