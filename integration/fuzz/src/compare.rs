//! Whether two outcomes of one statement agree: the same rows as
//! multisets, in the same order where the query orders them, or both an
//! error.

use crate::engines::Outcome;

#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    Same,
    /// One side failed on a value the other never computed: arithmetic
    /// overflow, division by zero or a failed cast depends on which rows
    /// an expression meets, and plans that filter earlier meet fewer.
    /// Or Squadron failed where single-node DataFusion fails too when it
    /// plans as the mode does (a DataFusion bug both share).
    /// Counted and shown, not a wrong answer.
    Tolerated(String),
    Differs(String),
}

/// Errors that depend on the rows an expression is evaluated on.
const DATA_DEPENDENT: &[&str] = &[
    "overflow",
    "Overflow",
    "Divide by zero",
    "divide by zero",
    "Cast error",
    "Can't cast",
    "cannot be cast",
];

/// How an answer shows NULL.
const NULL: &str = "NULL";

/// The first row that puts a NULL before a value where its query orders by
/// every column ascending (`ORDER BY 1, 2, …`, NULLS LAST): at the first
/// column where it differs from the next row, it holds NULL and the next a
/// value. Needs no types and no oracle: DataFusion 55 answered so itself
/// (finding 15), so comparing with it could not tell.
pub fn null_before_a_value(rows: &[Vec<String>]) -> Option<usize> {
    rows.windows(2).position(|pair| {
        let differs = pair[0].iter().zip(&pair[1]).find(|(a, b)| a != b);
        differs.is_some_and(|(a, b)| a == NULL && b != NULL)
    })
}

pub fn compare(expected: &Outcome, got: &Outcome, ordered: bool) -> Verdict {
    match (expected, got) {
        (Outcome::Rows(a), Outcome::Rows(b)) => {
            if let Some(row) = ordered.then(|| null_before_a_value(b)).flatten() {
                // DataFusion 55 answers some so itself (findings 15 and 17),
                // which Squadron repairs: ours must be in order regardless.
                return Verdict::Differs(format!(
                    "row {row} puts a NULL before a value of an ORDER BY … NULLS LAST"
                ));
            }
            let same = if ordered {
                a == b
            } else {
                sorted(a) == sorted(b)
            };
            if same {
                Verdict::Same
            } else if ordered && sorted(a) == sorted(b) && null_before_a_value(a).is_some() {
                Verdict::Tolerated(
                    "DataFusion's own answer puts a NULL before a value of its ORDER BY".into(),
                )
            } else {
                Verdict::Differs(format!(
                    "{} rows expected, {} rows given; first difference: {}",
                    a.len(),
                    b.len(),
                    first_difference(a, b, ordered)
                ))
            }
        }
        (Outcome::Error(_), Outcome::Error(_)) => Verdict::Same,
        (Outcome::Rows(_), Outcome::Error(e)) | (Outcome::Error(e), Outcome::Rows(_)) => {
            let which = if matches!(expected, Outcome::Error(_)) {
                "DataFusion failed"
            } else {
                "Squadron failed"
            };
            let text = format!("{which}: {e}");
            if DATA_DEPENDENT.iter().any(|d| e.contains(d)) {
                Verdict::Tolerated(text)
            } else {
                Verdict::Differs(text)
            }
        }
    }
}

/// Whether every row of `part` is a row of `whole`, as multisets.
pub fn contained(part: &[Vec<String>], whole: &[Vec<String>]) -> bool {
    let mut left: std::collections::HashMap<&Vec<String>, usize> = Default::default();
    for row in whole {
        *left.entry(row).or_default() += 1;
    }
    part.iter().all(|row| match left.get_mut(row) {
        Some(n) if *n > 0 => {
            *n -= 1;
            true
        }
        _ => false,
    })
}

fn sorted(rows: &[Vec<String>]) -> Vec<Vec<String>> {
    let mut rows = rows.to_vec();
    rows.sort();
    rows
}

/// A row one side has more often than the other.
fn first_difference(a: &[Vec<String>], b: &[Vec<String>], ordered: bool) -> String {
    if ordered {
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            if x != y {
                return format!("row {i}: expected {x:?}, given {y:?}");
            }
        }
        return "one answer is a prefix of the other".into();
    }
    let (a, b) = (sorted(a), sorted(b));
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Equal => (i, j) = (i + 1, j + 1),
            std::cmp::Ordering::Less => return format!("missing {:?}", a[i]),
            std::cmp::Ordering::Greater => return format!("extra {:?}", b[j]),
        }
    }
    match (a.get(i), b.get(j)) {
        (Some(row), _) => format!("missing {row:?}"),
        (_, Some(row)) => format!("extra {row:?}"),
        _ => "none".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(values: &[&str]) -> Outcome {
        Outcome::Rows(values.iter().map(|v| vec![v.to_string()]).collect())
    }

    #[test]
    fn multisets_orders_and_errors() {
        assert_eq!(
            compare(&rows(&["1", "2"]), &rows(&["2", "1"]), false),
            Verdict::Same
        );
        assert!(matches!(
            compare(&rows(&["1", "2"]), &rows(&["2", "1"]), true),
            Verdict::Differs(_)
        ));
        let Verdict::Differs(why) = compare(&rows(&["1", "1"]), &rows(&["1"]), false) else {
            panic!("a duplicate row lost is a difference");
        };
        assert!(why.contains("missing"), "{why}");
        let both = Outcome::Error("x".into());
        assert_eq!(
            compare(&both, &Outcome::Error("y".into()), false),
            Verdict::Same
        );
        let panicked = Outcome::Error("task panicked: index out of bounds".into());
        assert!(matches!(
            compare(&rows(&["1"]), &panicked, false),
            Verdict::Differs(_)
        ));
        // `ORDER BY 1, 2`: NULLs last in each column, within equal prefixes.
        let table = |rows: &[[&str; 2]]| -> Vec<Vec<String>> {
            rows.iter()
                .map(|row| row.iter().map(|v| v.to_string()).collect())
                .collect()
        };
        let sorted_right = table(&[["2", "a"], ["2", "NULL"], ["NULL", "a"], ["NULL", "NULL"]]);
        assert_eq!(null_before_a_value(&sorted_right), None);
        let mixed = table(&[["2", "a"], ["NULL", "a"], ["2", "b"]]);
        assert_eq!(null_before_a_value(&mixed), Some(1));

        let (right, wrong) = (
            Outcome::Rows(sorted_right.clone()),
            Outcome::Rows(mixed.clone()),
        );
        assert!(matches!(compare(&right, &wrong, true), Verdict::Differs(_)));
        // Both out of order alike: DataFusion's bug, which ours must not
        // share.
        assert!(matches!(compare(&wrong, &wrong, true), Verdict::Differs(_)));
        // The oracle's own answer out of order, ours in order: not ours.
        let mut reordered = mixed.clone();
        reordered.sort_by_key(|row| row[0] == "NULL");
        assert!(matches!(
            compare(&wrong, &Outcome::Rows(reordered), true),
            Verdict::Tolerated(_)
        ));
        let overflow = Outcome::Error("Arithmetic overflow: Overflow happened".into());
        assert!(matches!(
            compare(&rows(&["1"]), &overflow, false),
            Verdict::Tolerated(_)
        ));
    }

    #[test]
    fn containment_counts_repeated_rows() {
        let row = |v: &str| vec![v.to_string()];
        let whole = vec![row("1"), row("1"), row("2")];
        assert!(contained(&[row("1"), row("1")], &whole));
        assert!(contained(&[row("2"), row("1")], &whole));
        assert!(!contained(&[row("1"), row("1"), row("1")], &whole));
        assert!(!contained(&[row("3")], &whole));
    }
}
