//! Membership of a join's build keys as a Bloom filter: the part of a
//! dynamic filter that drops probe rows by key when the build side has
//! too many keys to list.
//!
//! Ranges (`keys`) prune what statistics can rule out, and an `IN` list
//! drops rows exactly, but only for a few thousand keys. A partitioned
//! join's build side has far more: in TPC-H q3 at SF10 each of two tasks
//! builds 730,000 order keys out of 15 M, and the line items scanned in
//! another stage (32 M rows, 1.3 GB) were shuffled whole to meet them.
//! A Bloom filter of those keys (about 1 MB) sent to the producers drops
//! every line item whose order is not among them but about one in a
//! hundred, before it is sent.
//!
//! The filter is the split-block Bloom filter Parquet specifies
//! (`parquet::bloom_filter::Sbbf`), over each row's key values in Arrow's
//! row format, hashed with XXH64: nothing in it depends on the process,
//! so a filter built on one worker holds on another. Both sides encode
//! keys of the same types (checked where the filter is made), so equal
//! keys have equal bytes.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayData, ArrayRef, AsArray, BooleanArray, BooleanBufferBuilder,
};
use datafusion::arrow::buffer::{BooleanBuffer, NullBuffer};
use datafusion::arrow::datatypes::{DataType, Schema};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::common::{internal_err, plan_err, Result};
use datafusion::logical_expr::ColumnarValue;
use datafusion::parquet::bloom_filter::Sbbf;
use datafusion::physical_expr::PhysicalExpr;

/// The filter's size while the build side is read; folded down when
/// complete (`Sbbf::fold_to_target_fpp`), to about 10 bits per key.
const BUILDING_BYTES: usize = 4 << 20;

/// Most build keys the filter takes: past it, a filter of this size
/// would let through too many false positives to pay for itself.
pub const MAX_BLOOM_KEYS: usize = 3_000_000;

/// The false positive rate the filter is folded down to.
const TARGET_FPP: f64 = 0.01;

/// The size of one block of the filter; a bit set from the wire is a
/// power of two of them, at most `BUILDING_BYTES`.
const BLOCK_BYTES: usize = 32;

/// Collects build keys into a Bloom filter.
#[derive(Debug)]
pub struct KeyBloomBuilder {
    converter: RowConverter,
    /// `None` once past `MAX_BLOOM_KEYS`.
    bloom: Option<Sbbf>,
    keys: usize,
}

impl KeyBloomBuilder {
    /// For build keys of `types`; `None` when Arrow's row format cannot
    /// encode them, or for floating point keys: equal floats can differ in
    /// bytes (0.0 and -0.0), and a filter must never drop a match.
    pub fn new(types: &[DataType]) -> Option<Self> {
        if types.iter().any(DataType::is_floating) {
            return None;
        }
        let converter = converter(types).ok()?;
        Some(Self {
            converter,
            bloom: Some(Sbbf::new_with_num_of_bytes(BUILDING_BYTES)),
            keys: 0,
        })
    }

    /// Adds the rows of one batch's key columns (in key order); a row
    /// with a NULL key matches nothing and is left out.
    pub fn insert(&mut self, columns: &[ArrayRef]) -> Result<()> {
        let Some(bloom) = &mut self.bloom else {
            return Ok(());
        };
        self.keys += for_each_key_row(&self.converter, columns, |_, row| bloom.insert(row))?;
        if self.keys > MAX_BLOOM_KEYS {
            self.bloom = None;
        }
        Ok(())
    }

    /// The filter of every key added, folded to its final size; `None`
    /// when there were too many keys.
    pub fn finish(self) -> Option<Sbbf> {
        let mut bloom = self.bloom?;
        bloom.fold_to_target_fpp(TARGET_FPP);
        Some(bloom)
    }
}

fn converter(types: &[DataType]) -> Result<RowConverter> {
    let fields = types.iter().cloned().map(SortField::new).collect();
    Ok(RowConverter::new(fields)?)
}

/// Calls `f(row index, key bytes)` for each row of `columns` whose keys
/// are all non-null; returns how many it called it for. One key of a
/// fixed-width type is its values' little-endian bytes, one string key
/// its UTF-8 bytes; other keys are rows of `converter`. Both sides of a
/// join encode keys of one type alike: the bytes depend on the type only.
fn for_each_key_row(
    converter: &RowConverter,
    columns: &[ArrayRef],
    mut f: impl FnMut(usize, &[u8]),
) -> Result<usize> {
    let nulls = columns
        .iter()
        .fold(None, |all: Option<NullBuffer>, column| {
            NullBuffer::union(all.as_ref(), column.logical_nulls().as_ref())
        });
    let valid = |i: usize| nulls.as_ref().is_none_or(|nulls| nulls.is_valid(i));
    let mut called = 0;
    let mut call = |i: usize, bytes: &[u8]| {
        if valid(i) {
            f(i, bytes);
            called += 1;
        }
    };
    match columns {
        [column] if fixed_width(column.data_type()).is_some() => {
            let width = fixed_width(column.data_type()).unwrap_or(1);
            let data = column.to_data();
            let values = value_bytes(&data, width);
            for (i, bytes) in values.chunks_exact(width).take(column.len()).enumerate() {
                call(i, bytes);
            }
        }
        [column] if *column.data_type() == DataType::Utf8 => {
            for (i, value) in column.as_string::<i32>().iter().enumerate() {
                call(i, value.unwrap_or_default().as_bytes());
            }
        }
        [column] if *column.data_type() == DataType::Utf8View => {
            for (i, value) in column.as_string_view().iter().enumerate() {
                call(i, value.unwrap_or_default().as_bytes());
            }
        }
        _ => {
            let rows = converter.convert_columns(columns)?;
            for (i, row) in rows.iter().enumerate() {
                call(i, row.as_ref());
            }
        }
    }
    Ok(called)
}

/// The bytes of a fixed-width array's values from its first, `width`
/// each: the key bytes of both `for_each_key_row` and `check_fixed_width`.
fn value_bytes(data: &ArrayData, width: usize) -> &[u8] {
    &data.buffers()[0].as_slice()[data.offset() * width..]
}

/// The byte width of the values of a primitive type (integers, dates,
/// decimals...), whose values buffer holds them side by side.
fn fixed_width(data_type: &DataType) -> Option<usize> {
    (data_type.is_primitive())
        .then(|| data_type.primitive_width())
        .flatten()
}

/// `true` for the rows whose `keys` may be in `bloom`: false for rows
/// whose keys it does not hold and for rows with a NULL key.
#[derive(Debug)]
pub struct KeyBloomExpr {
    keys: Vec<Arc<dyn PhysicalExpr>>,
    bloom: Arc<Sbbf>,
}

impl KeyBloomExpr {
    pub fn new(keys: Vec<Arc<dyn PhysicalExpr>>, bloom: Arc<Sbbf>) -> Self {
        Self { keys, bloom }
    }

    /// The bit set, for the wire.
    pub fn encode(&self) -> Result<Vec<u8>> {
        let mut bytes = Vec::with_capacity(self.bloom.num_blocks() * BLOCK_BYTES);
        self.bloom.write_bitset(&mut bytes)?;
        Ok(bytes)
    }

    /// The filter of the bit set `bytes` over `keys`, checked: a
    /// malformed one is refused, never evaluated.
    pub fn decode(bytes: &[u8], keys: &[Arc<dyn PhysicalExpr>]) -> Result<Self> {
        let blocks = bytes.len() / BLOCK_BYTES;
        if !bytes.len().is_multiple_of(BLOCK_BYTES)
            || !blocks.is_power_of_two()
            || bytes.len() > BUILDING_BYTES
        {
            return plan_err!(
                "a key Bloom filter is a power of two of 32-byte blocks up to {BUILDING_BYTES} bytes, not {} bytes",
                bytes.len()
            );
        }
        if keys.is_empty() {
            return plan_err!("a key Bloom filter needs at least one key");
        }
        Ok(Self::new(keys.to_vec(), Arc::new(Sbbf::new(bytes))))
    }
}

impl KeyBloomExpr {
    /// `evaluate` for one key of a fixed-width type: the same bytes as
    /// `for_each_key_row`, checked in a loop with nothing else in it, so
    /// the processor overlaps the cache misses of consecutive rows (a
    /// filter of a million keys is larger than a core's cache).
    fn check_fixed_width(&self, column: &ArrayRef, width: usize) -> ColumnarValue {
        let data = column.to_data();
        let values = value_bytes(&data, width);
        let present = BooleanBuffer::collect_bool(column.len(), |i| {
            self.bloom.check(&values[i * width..(i + 1) * width])
        });
        let kept = match column.logical_nulls() {
            Some(nulls) => &present & nulls.inner(),
            None => present,
        };
        ColumnarValue::Array(Arc::new(BooleanArray::new(kept, None)))
    }
}

impl fmt::Display for KeyBloomExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let keys: Vec<String> = self.keys.iter().map(|k| k.to_string()).collect();
        write!(
            f,
            "({}) IN bloom_filter({} bytes)",
            keys.join(", "),
            self.bloom.num_blocks() * BLOCK_BYTES
        )
    }
}

impl PartialEq for KeyBloomExpr {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.bloom, &other.bloom) && self.keys == other.keys
    }
}

impl Eq for KeyBloomExpr {}

impl Hash for KeyBloomExpr {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.keys.hash(state);
        Arc::as_ptr(&self.bloom).hash(state);
    }
}

impl PhysicalExpr for KeyBloomExpr {
    fn data_type(&self, _input_schema: &Schema) -> Result<DataType> {
        Ok(DataType::Boolean)
    }

    fn nullable(&self, _input_schema: &Schema) -> Result<bool> {
        Ok(false)
    }

    fn evaluate(&self, batch: &RecordBatch) -> Result<ColumnarValue> {
        let columns = self
            .keys
            .iter()
            .map(|key| key.evaluate(batch)?.into_array(batch.num_rows()))
            .collect::<Result<Vec<_>>>()?;
        if let [column] = columns.as_slice() {
            if let Some(width) = fixed_width(column.data_type()) {
                return Ok(self.check_fixed_width(column, width));
            }
        }
        let types: Vec<DataType> = columns.iter().map(|c| c.data_type().clone()).collect();
        let mut kept = BooleanBufferBuilder::new(batch.num_rows());
        kept.append_n(batch.num_rows(), false);
        for_each_key_row(&converter(&types)?, &columns, |i, row| {
            if self.bloom.check(row) {
                kept.set_bit(i, true);
            }
        })?;
        Ok(ColumnarValue::Array(Arc::new(BooleanArray::new(
            kept.finish(),
            None,
        ))))
    }

    fn children(&self) -> Vec<&Arc<dyn PhysicalExpr>> {
        self.keys.iter().collect()
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn PhysicalExpr>>,
    ) -> Result<Arc<dyn PhysicalExpr>> {
        if children.len() != self.keys.len() {
            return internal_err!(
                "KeyBloomExpr has {} keys, got {} children",
                self.keys.len(),
                children.len()
            );
        }
        Ok(Arc::new(Self::new(children, Arc::clone(&self.bloom))))
    }

    fn fmt_sql(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Int64Array, StringArray};
    use datafusion::arrow::datatypes::Field;
    use datafusion::physical_expr::expressions::col;

    fn batch(keys: Vec<Option<i64>>, names: Vec<Option<&str>>) -> RecordBatch {
        let schema = Schema::new(vec![
            Field::new("k", DataType::Int64, true),
            Field::new("s", DataType::Utf8, true),
        ]);
        RecordBatch::try_new(
            Arc::new(schema),
            vec![
                Arc::new(Int64Array::from(keys)),
                Arc::new(StringArray::from(names)),
            ],
        )
        .unwrap()
    }

    fn kept(expr: &KeyBloomExpr, batch: &RecordBatch) -> Vec<bool> {
        let value = expr.evaluate(batch).unwrap().into_array(batch.num_rows());
        value
            .unwrap()
            .as_boolean()
            .iter()
            .map(|v| v.unwrap())
            .collect()
    }

    fn built(columns: &[ArrayRef]) -> Sbbf {
        let types: Vec<DataType> = columns.iter().map(|c| c.data_type().clone()).collect();
        let mut builder = KeyBloomBuilder::new(&types).unwrap();
        builder.insert(columns).unwrap();
        builder.finish().unwrap()
    }

    #[test]
    fn keeps_every_build_key_and_drops_nearly_all_others() {
        let build: ArrayRef = Arc::new(Int64Array::from_iter_values((0..100_000).map(|k| k * 7)));
        let bloom = Arc::new(built(&[build]));
        let probe = batch((0..700_000).map(Some).collect(), vec![Some("x"); 700_000]);
        let schema = probe.schema();
        let expr = KeyBloomExpr::new(vec![col("k", &schema).unwrap()], bloom);
        let kept = kept(&expr, &probe);
        let false_positives = (0..700_000usize)
            .filter(|k| {
                assert!(k % 7 != 0 || kept[*k], "build key {k} dropped");
                k % 7 != 0 && kept[*k]
            })
            .count();
        // 600,000 keys not built; a 1 % filter lets about 6,000 through.
        assert!(
            false_positives < 18_000,
            "{false_positives} false positives"
        );
        assert!(bloom_bytes(&expr) < BUILDING_BYTES, "folded down");
    }

    fn bloom_bytes(expr: &KeyBloomExpr) -> usize {
        expr.bloom.num_blocks() * BLOCK_BYTES
    }

    #[test]
    fn several_keys_together_and_null_keys_match_nothing() {
        let build = [
            Arc::new(Int64Array::from(vec![Some(1), Some(2), None])) as ArrayRef,
            Arc::new(StringArray::from(vec![Some("a"), Some("b"), Some("c")])) as ArrayRef,
        ];
        let bloom = Arc::new(built(&build));
        let probe = batch(
            vec![Some(1), Some(2), Some(1), None, Some(3)],
            vec![Some("a"), Some("b"), Some("b"), Some("c"), None],
        );
        let schema = probe.schema();
        let keys = vec![col("k", &schema).unwrap(), col("s", &schema).unwrap()];
        let expr = KeyBloomExpr::new(keys, bloom);
        assert_eq!(kept(&expr, &probe), vec![true, true, false, false, false]);
    }

    #[test]
    fn the_wire_form_filters_alike_and_malformed_bit_sets_are_refused() {
        let build: ArrayRef = Arc::new(Int64Array::from_iter_values(0..10_000));
        let probe = batch((0..20_000).map(Some).collect(), vec![None; 20_000]);
        let keys = vec![col("k", &probe.schema()).unwrap()];
        let expr = KeyBloomExpr::new(keys.clone(), Arc::new(built(&[build])));
        let decoded = KeyBloomExpr::decode(&expr.encode().unwrap(), &keys).unwrap();
        assert_eq!(kept(&expr, &probe), kept(&decoded, &probe));
        for bad in [
            vec![],
            vec![0u8; 31],
            vec![0u8; 96],
            vec![0u8; BUILDING_BYTES * 2],
        ] {
            assert!(
                KeyBloomExpr::decode(&bad, &keys).is_err(),
                "{} bytes",
                bad.len()
            );
        }
        assert!(KeyBloomExpr::decode(&[0u8; 32], &[]).is_err());
    }

    /// Time per probe row, for tuning: `cargo test --release -p
    /// squadron-exec --lib bloom::tests::probe_speed -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn probe_speed() {
        // Over 2 MiB of filter: more than a core's cache here.
        let build: ArrayRef =
            Arc::new(Int64Array::from_iter_values((0..2_000_000).map(|k| k * 20)));
        let bloom = Arc::new(built(&[build]));
        println!("{} bytes", bloom.num_blocks() * BLOCK_BYTES);
        let probe = batch(
            (0..8192).map(|k| Some(k * 7919)).collect(),
            vec![None; 8192],
        );
        let expr = KeyBloomExpr::new(vec![col("k", &probe.schema()).unwrap()], bloom);
        let start = std::time::Instant::now();
        for _ in 0..1000 {
            expr.evaluate(&probe).unwrap();
        }
        let per_row = start.elapsed().as_nanos() as f64 / (1000.0 * 8192.0);
        println!("{per_row:.1} ns per probe row");
    }

    #[test]
    fn too_many_build_keys_make_no_filter() {
        let mut builder = KeyBloomBuilder::new(&[DataType::Int64]).unwrap();
        let keys = (MAX_BLOOM_KEYS as i64 + 1) / 2 + 1;
        for part in 0..2 {
            let values = Int64Array::from_iter_values(part * keys..(part + 1) * keys);
            builder.insert(&[Arc::new(values) as ArrayRef]).unwrap();
        }
        assert!(builder.finish().is_none());
    }
}
