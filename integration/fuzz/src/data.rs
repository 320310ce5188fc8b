//! Generated tables: one schema for all of them (so any two join on any
//! key), data with the edge cases the rewrites key on, written as Parquet
//! files as users write them: several files and row groups, some sorted
//! by a key with the order recorded, some not.
//!
//! Edge cases: NULLs, i64 and i32 extremes, duplicated and skewed keys,
//! empty tables, decimals at their precision, multibyte strings, dates far
//! apart, NaN; `k2` equals `k0` in about half the rows, so equalities
//! between two columns of one table matter.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, BooleanArray, Date32Array, Decimal128Array, Float64Array, Int32Array, Int64Array,
    RecordBatch, StringArray,
};
use datafusion::arrow::compute::{sort_to_indices, take_record_batch, SortOptions};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use parquet::arrow::ArrowWriter;
use parquet::file::metadata::SortingColumn;
use parquet::file::properties::WriterProperties;

use crate::rng::Rng;

/// What a column holds, which decides the expressions made of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    BigInt,
    Int,
    Decimal,
    Float,
    Text,
    Date,
    Bool,
}

/// Every table's columns. `k0`, `k1`, `k2` are the join keys.
pub const COLUMNS: &[(&str, Kind)] = &[
    ("k0", Kind::BigInt),
    ("k1", Kind::Int),
    ("k2", Kind::BigInt),
    ("v", Kind::Decimal),
    ("f", Kind::Float),
    ("s", Kind::Text),
    ("d", Kind::Date),
    ("b", Kind::Bool),
];

/// The decimal column's type: 12 digits, values up to the precision.
pub const DECIMAL: (u8, i8) = (12, 2);

pub fn schema() -> SchemaRef {
    let fields: Vec<Field> = COLUMNS
        .iter()
        .map(|(name, kind)| {
            let data_type = match kind {
                Kind::BigInt => DataType::Int64,
                Kind::Int => DataType::Int32,
                Kind::Decimal => DataType::Decimal128(DECIMAL.0, DECIMAL.1),
                Kind::Float => DataType::Float64,
                Kind::Text => DataType::Utf8,
                Kind::Date => DataType::Date32,
                Kind::Bool => DataType::Boolean,
            };
            Field::new(*name, data_type, true)
        })
        .collect();
    Arc::new(Schema::new(fields))
}

/// Strings with multibyte text, LIKE's own characters and the empty string.
pub const STRINGS: &[&str] = &[
    "",
    "a",
    "ab",
    "abc",
    "b",
    "ba",
    "é",
    "éa",
    "日本",
    "日本語",
    "x%y",
    "a_b",
    "ü ü",
    "🙂",
    "special requests",
    "aé日b",
];

/// One table: its files (each a batch of rows), and how they are laid out.
#[derive(Debug, Clone)]
pub struct Table {
    pub name: String,
    pub files: Vec<RecordBatch>,
    /// Each file sorted by `k0` (NULLs first), the order recorded in the
    /// file and declared to the engines (`WITH ORDER`).
    pub sorted: bool,
    pub row_group_rows: usize,
}

impl Table {
    pub fn rows(&self) -> usize {
        self.files.iter().map(|f| f.num_rows()).sum()
    }

    /// The table with only the rows `keep` chooses of each file.
    pub fn with_rows(&self, keep: impl Fn(&RecordBatch) -> RecordBatch) -> Table {
        Table {
            files: self.files.iter().map(keep).collect(),
            ..self.clone()
        }
    }

    /// Writes the files under `dir/<name>/`; the table's location.
    pub fn write(&self, dir: &Path) -> anyhow::Result<PathBuf> {
        let location = dir.join(&self.name);
        std::fs::create_dir_all(&location)?;
        for (i, batch) in self.files.iter().enumerate() {
            let mut properties = WriterProperties::builder()
                .set_max_row_group_row_count(Some(self.row_group_rows.max(1)));
            if self.sorted {
                properties = properties.set_sorting_columns(Some(vec![SortingColumn {
                    column_idx: 0,
                    descending: false,
                    nulls_first: true,
                }]));
            }
            let file = File::create(location.join(format!("part-{i}.parquet")))?;
            let mut writer = ArrowWriter::try_new(file, batch.schema(), Some(properties.build()))?;
            writer.write(batch)?;
            writer.close()?;
        }
        Ok(location)
    }

    /// The statement that makes it a table of an engine.
    pub fn create_sql(&self, location: &Path) -> String {
        let order = if self.sorted {
            " WITH ORDER (k0 ASC NULLS FIRST)"
        } else {
            ""
        };
        let columns: Vec<String> = COLUMNS
            .iter()
            .map(|(name, kind)| format!("{name} {}", sql_type(*kind)))
            .collect();
        format!(
            "CREATE EXTERNAL TABLE {} ({}) STORED AS PARQUET{order} LOCATION '{}/'",
            self.name,
            columns.join(", "),
            location.display()
        )
    }
}

pub fn sql_type(kind: Kind) -> String {
    match kind {
        Kind::BigInt => "BIGINT".into(),
        Kind::Int => "INT".into(),
        Kind::Decimal => format!("DECIMAL({}, {})", DECIMAL.0, DECIMAL.1),
        Kind::Float => "DOUBLE".into(),
        Kind::Text => "VARCHAR".into(),
        Kind::Date => "DATE".into(),
        Kind::Bool => "BOOLEAN".into(),
    }
}

/// How one table's values are drawn.
struct Shape {
    domain: i64,
    null_percent: usize,
    skewed: bool,
    extremes: bool,
}

/// 3 to 5 tables named `t0`, `t1`, ….
///
/// Their keys mostly share one domain, and at most one table is empty: a
/// join of tables whose keys seldom meet, or of an empty one, answers no
/// row whatever the plan, and compares nothing. With each table's domain
/// and emptiness drawn on its own, half the generated queries answered no
/// row (seed 7: 99 of 200, most over an empty table of three). Tables
/// of 3 rows and without NULLs (where `IS NULL` keeps nothing) are rarer
/// for the same reason.
pub fn generate(rng: &mut Rng) -> Vec<Table> {
    let count = 3 + rng.below(3);
    let domain = *rng.pick(&[5, 30, 30, 300]);
    // Among 4 or 5 tables: of 3, a third of the FROM items would be it.
    let empty = (count > 3 && rng.chance(50)).then(|| rng.below(count));
    (0..count)
        .map(|i| {
            let mut rng = rng.fork();
            let domain = match rng.chance(75) {
                true => domain,
                false => *rng.pick(&[2, 5, 30, 300, 5000]),
            };
            table(&mut rng, format!("t{i}"), domain, empty == Some(i))
        })
        .collect()
}

fn table(rng: &mut Rng, name: String, domain: i64, empty: bool) -> Table {
    let rows = match empty {
        true => 0,
        false => *rng.pick(&[3, 60, 200, 200, 400, 400, 1000, 1000, 2000]),
    };
    // Keys repeat, but not so often that a few joins multiply into
    // millions of rows.
    let shape = Shape {
        domain: domain.max(rows as i64 / 20),
        null_percent: *rng.pick(&[0, 5, 5, 30]),
        skewed: rng.chance(30),
        extremes: rng.chance(30),
    };
    let sorted = rng.chance(40);
    let file_count = 1 + rng.below(3);
    let mut files = vec![];
    for i in 0..file_count {
        let share = rows / file_count + usize::from(i < rows % file_count);
        let batch = rows_of(rng, &shape, share);
        files.push(if sorted { sorted_by_key(&batch) } else { batch });
    }
    Table {
        name,
        files,
        sorted,
        row_group_rows: *rng.pick(&[16, 100, 1024]),
    }
}

fn rows_of(rng: &mut Rng, shape: &Shape, rows: usize) -> RecordBatch {
    let null = |rng: &mut Rng| rng.chance(shape.null_percent);
    let k0: Vec<Option<i64>> = (0..rows)
        .map(|_| (!null(rng)).then(|| big_key(rng, shape)))
        .collect();
    let k1: Int32Array = (0..rows)
        .map(|_| (!null(rng)).then(|| int_key(rng, shape)))
        .collect();
    let k2: Int64Array = k0
        .iter()
        .map(|k| match rng.chance(50) {
            true => *k,
            false => (!null(rng)).then(|| big_key(rng, shape)),
        })
        .collect();
    let limit = 10i128.pow(DECIMAL.0 as u32) - 1;
    let v: Decimal128Array = (0..rows)
        .map(|_| {
            (!null(rng)).then(|| match shape.extremes && rng.chance(5) {
                true => *rng.pick(&[limit, -limit]),
                false => rng.between(-100_000, 100_000) as i128,
            })
        })
        .collect::<Decimal128Array>()
        .with_precision_and_scale(DECIMAL.0, DECIMAL.1)
        .expect("the decimal type is valid");
    let f: Float64Array = (0..rows)
        .map(|_| {
            (!null(rng)).then(|| match shape.extremes && rng.chance(2) {
                true => f64::NAN,
                false => rng.between(-4_000, 4_000) as f64 / 4.0,
            })
        })
        .collect();
    let s: StringArray = (0..rows)
        .map(|_| (!null(rng)).then(|| rng.pick(STRINGS).to_string()))
        .collect();
    let d: Date32Array = (0..rows)
        .map(|_| {
            (!null(rng)).then(|| match shape.extremes && rng.chance(3) {
                true => *rng.pick(&[-719_162, 0, 2_932_896]),
                false => rng.between(18_000, 18_000 + shape.domain.min(3_000)) as i32,
            })
        })
        .collect();
    let b: BooleanArray = (0..rows)
        .map(|_| (!null(rng)).then(|| rng.chance(50)))
        .collect();
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from(k0)),
        Arc::new(k1),
        Arc::new(k2),
        Arc::new(v),
        Arc::new(f),
        Arc::new(s),
        Arc::new(d),
        Arc::new(b),
    ];
    RecordBatch::try_new(schema(), columns).expect("columns match the schema")
}

fn big_key(rng: &mut Rng, shape: &Shape) -> i64 {
    if shape.extremes && rng.chance(3) {
        return *rng.pick(&[i64::MIN, i64::MAX, -1]);
    }
    if shape.skewed && rng.chance(10) {
        return 0;
    }
    rng.between(0, shape.domain - 1)
}

fn int_key(rng: &mut Rng, shape: &Shape) -> i32 {
    if shape.extremes && rng.chance(3) {
        return *rng.pick(&[i32::MIN, i32::MAX]);
    }
    if shape.skewed && rng.chance(10) {
        return 0;
    }
    rng.between(0, shape.domain - 1) as i32
}

fn sorted_by_key(batch: &RecordBatch) -> RecordBatch {
    let options = SortOptions {
        descending: false,
        nulls_first: true,
    };
    let order = sort_to_indices(batch.column(0), Some(options), None).expect("k0 sorts");
    take_record_batch(batch, &order).expect("the order indexes the batch")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_are_reproducible_and_hold_their_edge_cases() {
        let one = generate(&mut Rng::new(3));
        let again = generate(&mut Rng::new(3));
        assert_eq!(one.len(), again.len());
        for (a, b) in one.iter().zip(&again) {
            assert_eq!(a.files, b.files);
        }
        let dir = tempfile::tempdir().unwrap();
        for table in &one {
            let location = table.write(dir.path()).unwrap();
            assert_eq!(
                std::fs::read_dir(location).unwrap().count(),
                table.files.len()
            );
        }
        // Over many seeds every edge case shows up.
        let tables: Vec<Table> = (0..40).flat_map(|s| generate(&mut Rng::new(s))).collect();
        let keys = |t: &Table| -> Vec<Option<i64>> {
            t.files
                .iter()
                .flat_map(|f| {
                    let k0 = f.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
                    k0.iter().collect::<Vec<_>>()
                })
                .collect()
        };
        let all: Vec<Option<i64>> = tables.iter().flat_map(keys).collect();
        assert!(all.contains(&Some(i64::MIN)) && all.contains(&Some(i64::MAX)));
        assert!(all.contains(&None));
        assert!(tables.iter().any(|t| t.rows() == 0));
        assert!(tables.iter().any(|t| t.sorted) && tables.iter().any(|t| !t.sorted));
    }
}
