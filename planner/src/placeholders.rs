//! JDBC-style `?` placeholders, numbered.
//!
//! JDBC and ODBC clients write parameters as `?`; DataFusion plans
//! numbered ones (`$1`, `$2`, …) and rejects a bare `?`. Each `?` token
//! (never one inside a string literal or a comment: the SQL tokenizer
//! tells them apart) becomes `$n` in order of appearance, and the rest of
//! the text is kept byte for byte.

use std::borrow::Cow;

use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};

/// `sql` with its `?` placeholders numbered; unchanged when it has none
/// (or does not tokenize: the planner then reports the syntax error).
pub fn number_placeholders(sql: &str) -> Cow<'_, str> {
    if !sql.contains('?') {
        return Cow::Borrowed(sql);
    }
    let dialect = GenericDialect {};
    let Ok(tokens) = Tokenizer::new(&dialect, sql)
        .with_unescape(false)
        .tokenize_with_location()
    else {
        return Cow::Borrowed(sql);
    };
    let line_starts: Vec<usize> = std::iter::once(0)
        .chain(sql.match_indices('\n').map(|(i, _)| i + 1))
        .collect();
    let offsets: Vec<usize> = tokens
        .iter()
        .filter(|t| matches!(&t.token, Token::Placeholder(p) if p == "?"))
        .filter_map(|t| {
            let start = t.span.start;
            let line = *line_starts.get(start.line.checked_sub(1)? as usize)?;
            // Columns count characters, not bytes.
            sql[line..]
                .char_indices()
                .nth(start.column.checked_sub(1)? as usize)
                .map(|(i, _)| line + i)
        })
        .collect();
    if offsets.is_empty() {
        return Cow::Borrowed(sql);
    }
    let mut out = String::with_capacity(sql.len() + offsets.len() * 2);
    let mut copied = 0;
    for (n, offset) in offsets.into_iter().enumerate() {
        out.push_str(&sql[copied..offset]);
        out.push_str(&format!("${}", n + 1));
        copied = offset + 1;
    }
    out.push_str(&sql[copied..]);
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn question_marks_are_numbered_in_order() {
        assert_eq!(
            number_placeholders("SELECT a FROM t WHERE a = ? AND b < ?"),
            "SELECT a FROM t WHERE a = $1 AND b < $2"
        );
        assert_eq!(
            number_placeholders("SELECT *\nFROM t\nWHERE é = 'ü' AND x IN (?, ?)"),
            "SELECT *\nFROM t\nWHERE é = 'ü' AND x IN ($1, $2)"
        );
    }

    #[test]
    fn literals_comments_and_numbered_placeholders_are_kept() {
        for sql in [
            "SELECT 'what?' FROM t",
            "SELECT 'it''s?' -- really?\nFROM t",
            "SELECT $1",
            "SELECT 1",
        ] {
            assert_eq!(number_placeholders(sql), sql);
        }
        assert_eq!(
            number_placeholders("SELECT 'a?b', ? /* ? */"),
            "SELECT 'a?b', $1 /* ? */"
        );
    }
}
