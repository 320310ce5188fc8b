//! Comparing query answers with an oracle's: same rows, in order when the
//! query orders them, floats within a tolerance. Used by the cluster tests
//! and by `squadron-bench`, which checks every answer it times.

use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::datatypes::{DataType, Float32Type, Float64Type};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};

#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    Text(String),
    Float(f64),
}

impl Cell {
    fn close_to(&self, other: &Cell) -> bool {
        match (self, other) {
            (Cell::Float(a), Cell::Float(b)) => {
                a == b || (a - b).abs() <= 1e-9_f64.max(1e-6 * a.abs().max(b.abs()))
            }
            (a, b) => a == b,
        }
    }

    fn sort_key(&self) -> String {
        match self {
            Cell::Text(s) => s.clone(),
            // Rounded so that rows differing in float noise sort alike.
            Cell::Float(f) => format!("{f:.3e}"),
        }
    }
}

pub type Row = Vec<Cell>;

pub fn rows(batches: &[RecordBatch]) -> Vec<Row> {
    let options = FormatOptions::default().with_null("NULL");
    let mut out = vec![];
    for batch in batches {
        let columns: Vec<_> = batch.columns().iter().collect();
        for i in 0..batch.num_rows() {
            let row = columns
                .iter()
                .map(|col| cell(col.as_ref(), i, &options))
                .collect();
            out.push(row);
        }
    }
    out
}

fn cell(col: &dyn Array, i: usize, options: &FormatOptions) -> Cell {
    if col.is_null(i) {
        return Cell::Text("NULL".into());
    }
    match col.data_type() {
        DataType::Float64 => Cell::Float(col.as_primitive::<Float64Type>().value(i)),
        DataType::Float32 => Cell::Float(col.as_primitive::<Float32Type>().value(i) as f64),
        _ => {
            let formatter = ArrayFormatter::try_new(col, options).expect("formattable column");
            Cell::Text(formatter.value(i).to_string())
        }
    }
}

/// Checks `actual` against `expected`; `ordered` when the query has an
/// ORDER BY. Returns a description of the first difference.
pub fn same_rows(
    actual: &[RecordBatch],
    expected: &[RecordBatch],
    ordered: bool,
) -> Result<(), String> {
    let mut a = rows(actual);
    let mut e = rows(expected);
    if a.len() != e.len() {
        return Err(format!("{} rows, expected {}", a.len(), e.len()));
    }
    if !ordered {
        let key = |r: &Row| r.iter().map(Cell::sort_key).collect::<Vec<_>>();
        a.sort_by_key(key);
        e.sort_by_key(key);
    }
    for (i, (ra, re)) in a.iter().zip(&e).enumerate() {
        let same = ra.len() == re.len() && ra.iter().zip(re).all(|(x, y)| x.close_to(y));
        if !same {
            return Err(format!("row {i}: got {ra:?}, expected {re:?}"));
        }
    }
    Ok(())
}

/// Whether the statement's outermost query has an ORDER BY.
pub fn is_ordered(sql: &str) -> bool {
    sql.to_ascii_lowercase().contains("order by")
}
