//! Statements for plan templates (`squadron.reuse_plans`): a statement that
//! differs from an earlier one of its session only in its constants runs
//! the earlier one's plan with the new values. Only a filtered read of one
//! table naming plain columns qualifies (`planner/src/templates`), which the
//! generated queries never are (they alias every column and table), so this
//! check writes such statements: one shape several times, each time with
//! constants drawn from other rows of the table.

use datafusion::arrow::array::Array;
use datafusion::arrow::util::display::array_value_to_string;

use crate::data::{Table, COLUMNS};
use crate::rng::Rng;

/// The columns whose constants a template swaps (integers and strings).
const SWAPPED: &[&str] = &["k0", "k1", "k2", "s"];
const OPERATORS: &[&str] = &["=", "<>", "<", "<=", ">", ">="];

/// `count` statements of one template shape over `table`, or none when it
/// has no rows to draw constants from.
pub fn statements(rng: &mut Rng, table: &Table, count: usize) -> Vec<String> {
    if table.rows() == 0 {
        return vec![];
    }
    let shown: Vec<&str> = COLUMNS
        .iter()
        .map(|(name, _)| *name)
        .filter(|_| rng.chance(50))
        .collect();
    let shown = if shown.is_empty() { vec!["k0"] } else { shown };
    let compared: Vec<(&str, &str)> = (0..1 + rng.below(3))
        .map(|_| (*rng.pick(SWAPPED), *rng.pick(OPERATORS)))
        .collect();
    (0..count)
        .filter_map(|_| {
            let conditions: Option<Vec<String>> = compared
                .iter()
                .map(|(column, op)| {
                    Some(format!("{column} {op} {}", constant(rng, table, column)?))
                })
                .collect();
            Some(format!(
                "SELECT {} FROM {} WHERE {}",
                shown.join(", "),
                table.name,
                conditions?.join(" AND ")
            ))
        })
        .collect()
}

/// The SQL literal of `column` in a row drawn from `table`; `None` where
/// that row holds NULL (a NULL literal is no constant a template swaps).
fn constant(rng: &mut Rng, table: &Table, column: &str) -> Option<String> {
    let files: Vec<_> = table.files.iter().filter(|f| f.num_rows() > 0).collect();
    let file = rng.pick(&files);
    let row = rng.below(file.num_rows());
    let values = file.column_by_name(column)?;
    if values.is_null(row) {
        return None;
    }
    let text = array_value_to_string(values, row).ok()?;
    Some(match column {
        "s" => format!("'{}'", text.replace('\'', "''")),
        _ => text,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_shape_with_constants_from_the_rows() {
        let mut rng = Rng::new(7);
        let tables = crate::data::generate(&mut rng);
        let table = tables
            .iter()
            .find(|t| t.rows() > 100)
            .expect("a table with rows");
        let statements = statements(&mut rng, table, 3);
        assert!(!statements.is_empty());
        let shape = |sql: &str| {
            sql.split(' ')
                .map(|word| match word.parse::<i64>() {
                    Ok(_) => "N",
                    Err(_) if word.starts_with('\'') => "S",
                    Err(_) => word,
                })
                .collect::<Vec<_>>()
                .join(" ")
        };
        for sql in &statements {
            assert!(
                sql.starts_with("SELECT ") && sql.contains(" WHERE "),
                "{sql}"
            );
            assert_eq!(
                shape(sql).split(" WHERE ").next(),
                shape(&statements[0]).split(" WHERE ").next()
            );
        }
    }
}
