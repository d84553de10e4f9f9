//! Named statements from a `.sql` file: each statement follows a `-- name: <id>` line.

/// Looks up statement `name` in `file` (the text of an included `.sql` file). A missing
/// name is a bug in counterlab, found by the unit test that loads every strategy.
pub fn statement(file: &'static str, name: &str) -> &'static str {
    let marker = format!("-- name: {name}\n");
    let start = file
        .find(&marker)
        .unwrap_or_else(|| panic!("statement {name:?} missing from its .sql file"))
        + marker.len();
    let rest = &file[start..];
    let end = rest.find("\n-- ").unwrap_or(rest.len());
    let text = rest[..end].trim();
    assert!(!text.is_empty(), "statement {name:?} is empty");
    text.strip_suffix(';').unwrap_or(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_statements_between_markers() {
        let file = "-- head\n\n-- name: a\nSELECT 1;\n\n-- comment\n-- name: b\nSELECT\n  2;\n";
        assert_eq!(statement(file, "a"), "SELECT 1");
        assert_eq!(statement(file, "b"), "SELECT\n  2");
    }
}
