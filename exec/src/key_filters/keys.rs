//! What a join's build side held, key by key, and the probe-side filter
//! that follows from it.
//!
//! The filter only ever removes probe rows that cannot match a build row,
//! and its main use is pruning: a Parquet scan skips the row groups and
//! pages whose statistics it rules out. So it is made of what statistics
//! can rule out: per key, the range of build values, or, for integer
//! keys (order keys, dates, ids), up to `MAX_RANGES` ranges around the
//! build values separated by the widest gaps between them. Probe files
//! sorted or clustered by the key (TPC-H's lineitem by `l_orderkey`) then
//! skip every row group between the build's keys, not only those outside
//! its overall range.

use std::collections::BTreeSet;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Int64Type, Schema};
use datafusion::common::{Result, ScalarValue};
use datafusion::functions_aggregate::min_max::{MaxAccumulator, MinAccumulator};
use datafusion::logical_expr::{Accumulator, Operator};
use datafusion::physical_expr::expressions::{lit, BinaryExpr, InListExpr};
use datafusion::physical_expr::PhysicalExpr;

use super::bloom::{KeyBloomBuilder, KeyBloomExpr};

/// Most ranges one key's filter is made of. Each is two comparisons per
/// row group or page checked, never per row (scans use the filter for
/// pruning), so this is cheap; more ranges fit sparse build keys closer.
pub const MAX_RANGES: usize = 32;

/// Most distinct build values of one key listed in the filter itself
/// (`key IN (…)`, a hash set per row): scans prune by the ranges only, but
/// a filter over rows read from another stage (`stage_reads`) drops every
/// row whose key is not listed.
pub const MAX_LISTED: usize = 4096;

/// Widest span of keys an `IN` list's row form (`row_form`) keeps as a
/// bitmap (512 KiB); wider sets are searched.
pub const MAX_BITMAP_SPAN: u64 = 1 << 22;

/// How many times its count of keys a long list's span must be, at least,
/// for the list to be worth its length (`KeyValues::listed`).
const MIN_LISTED_SPARSENESS: u64 = 4;

/// Most distinct integer values of one key kept to place the ranges; past
/// it the key is filtered by its overall range only. Bounds the memory and
/// the time (a set insert per build row up to it) a large build side
/// costs.
pub const MAX_DISTINCT_TRACKED: usize = 1 << 16;

/// One join key's build-side values seen so far.
#[derive(Debug)]
struct KeyValues {
    min: MinAccumulator,
    max: MaxAccumulator,
    /// Distinct values of an integer key (as i64), until there are too many.
    distinct: Option<BTreeSet<i64>>,
}

impl KeyValues {
    fn new(data_type: &DataType) -> Result<Self> {
        Ok(Self {
            min: MinAccumulator::try_new(data_type)?,
            max: MaxAccumulator::try_new(data_type)?,
            distinct: is_integral(data_type).then(BTreeSet::new),
        })
    }

    fn update(&mut self, values: &ArrayRef) -> Result<()> {
        self.min.update_batch(std::slice::from_ref(values))?;
        self.max.update_batch(std::slice::from_ref(values))?;
        if let Some(distinct) = &mut self.distinct {
            let as_i64 = cast(values, &DataType::Int64)?;
            distinct.extend(as_i64.as_primitive::<Int64Type>().iter().flatten());
            if distinct.len() > MAX_DISTINCT_TRACKED {
                self.distinct = None;
            }
        }
        Ok(())
    }

    /// Whether the filter lists this key's values (`key IN (…)`): up to
    /// `MAX_LISTED` of them, and up to `max_listed` where they span little
    /// enough for the list's row form to be a bitmap (`row_form`) and are
    /// sparse in that span: keys filling their span (TPC-H q8's 10,000
    /// supplier keys at SF1) drop no row their range keeps, and a list
    /// that long costs each scan that holds it time to open.
    fn listed(&self, max_listed: usize) -> bool {
        let Some(distinct) = &self.distinct else {
            return false;
        };
        let span = match (distinct.first(), distinct.last()) {
            (Some(low), Some(high)) => high.abs_diff(*low),
            _ => 0,
        };
        let sparse = span / (distinct.len() as u64).max(1) >= MIN_LISTED_SPARSENESS;
        distinct.len() <= MAX_LISTED
            || (distinct.len() <= max_listed && span < MAX_BITMAP_SPAN && sparse)
    }

    /// The probe rows of `probe_key` (over `probe_schema`) that may match:
    /// `None` when no build row has a non-null value for this key, so
    /// nothing matches.
    fn filter(
        &mut self,
        probe_key: &Arc<dyn PhysicalExpr>,
        probe_schema: &Schema,
        max_listed: usize,
    ) -> Result<Option<Arc<dyn PhysicalExpr>>> {
        let data_type = &probe_key.data_type(probe_schema)?;
        let (min, max) = (self.min.evaluate()?, self.max.evaluate()?);
        if min.is_null() || max.is_null() {
            return Ok(None);
        }
        let ranges = match &self.distinct {
            Some(distinct) => integer_ranges(distinct)
                .into_iter()
                .map(|(low, high)| {
                    let low = ScalarValue::Int64(Some(low)).cast_to(data_type)?;
                    let high = ScalarValue::Int64(Some(high)).cast_to(data_type)?;
                    Ok((low, high))
                })
                .collect::<Result<Vec<_>>>()?,
            None => vec![(min.cast_to(data_type)?, max.cast_to(data_type)?)],
        };
        let Some(ranges) = ranges
            .into_iter()
            .map(|(low, high)| within(probe_key, low, high))
            .reduce(|a, b| binary(a, Operator::Or, b))
        else {
            return Ok(None);
        };
        let listed = match &self.distinct {
            Some(distinct) if self.listed(max_listed) => distinct
                .iter()
                .map(|v| Ok(lit(ScalarValue::Int64(Some(*v)).cast_to(data_type)?)))
                .collect::<Result<Vec<_>>>()?,
            _ => return Ok(Some(ranges)),
        };
        let listed = InListExpr::try_new(Arc::clone(probe_key), listed, false, probe_schema)?;
        Ok(Some(binary(ranges, Operator::And, Arc::new(listed))))
    }
}

/// How a join's filter tests membership of the build keys, besides the
/// ranges scans prune by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Membership {
    /// Also a Bloom filter of the keys when they are too many to list.
    pub bloom: bool,
    /// Most distinct values of one integer key listed (`key IN (…)`).
    pub max_listed: usize,
}

impl Membership {
    /// A filter scans prune by: nothing beyond the usual short list.
    pub const PRUNING: Self = Self {
        bloom: false,
        max_listed: MAX_LISTED,
    };

    /// A filter that drops the rows of scans in its own task: every
    /// tracked key listed, since the list stays in the process and its
    /// row form (a bitmap or a sorted search) costs a few nanoseconds a
    /// row, where a Bloom filter's hashing costs more than the hash probe
    /// it would save (TPC-H q8 at SF10: 24 ns a row).
    pub const IN_TASK: Self = Self {
        bloom: false,
        max_listed: MAX_DISTINCT_TRACKED,
    };

    /// A filter that also drops rows read from other stages, sent to
    /// their producers: a short list, and a Bloom filter when `bloom`.
    pub fn over_stage_reads(bloom: bool) -> Self {
        Self {
            bloom,
            max_listed: MAX_LISTED,
        }
    }
}

/// The build side's key values, for a join on `keys` columns.
#[derive(Debug)]
pub struct BuildKeys {
    keys: Vec<KeyValues>,
    types: Vec<DataType>,
    /// All keys together, when the filter is to drop rows by membership.
    bloom: Option<KeyBloomBuilder>,
    max_listed: usize,
    rows: usize,
}

impl BuildKeys {
    /// For build keys of `types`, tested for membership as `membership`
    /// says.
    pub fn new(types: &[DataType], membership: Membership) -> Result<Self> {
        Ok(Self {
            keys: types.iter().map(KeyValues::new).collect::<Result<_>>()?,
            types: types.to_vec(),
            bloom: membership
                .bloom
                .then(|| KeyBloomBuilder::new(types))
                .flatten(),
            max_listed: membership.max_listed,
            rows: 0,
        })
    }

    /// Adds one batch's key columns, in key order.
    pub fn update(&mut self, columns: &[ArrayRef]) -> Result<()> {
        self.rows += columns.first().map_or(0, |c| c.len());
        for (key, values) in self.keys.iter_mut().zip(columns) {
            key.update(values)?;
        }
        if let Some(bloom) = &mut self.bloom {
            bloom.insert(columns)?;
        }
        Ok(())
    }

    /// Build rows seen.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// The filter on the probe side's keys `probe_keys` (over
    /// `probe_schema`) that keeps every row that can match a build row
    /// (keys equal, NULL matching nothing): `false` when no build row has
    /// a non-null key, so an empty build side prunes the whole probe side.
    pub fn probe_filter(
        &mut self,
        probe_keys: &[Arc<dyn PhysicalExpr>],
        probe_schema: &Schema,
    ) -> Result<Arc<dyn PhysicalExpr>> {
        let mut conjuncts = vec![];
        for (key, probe_key) in self.keys.iter_mut().zip(probe_keys) {
            match key.filter(probe_key, probe_schema, self.max_listed)? {
                Some(filter) => conjuncts.push(filter),
                None => return Ok(lit(false)),
            }
        }
        if let Some(bloom) = self.membership(probe_keys, probe_schema)? {
            conjuncts.push(bloom);
        }
        Ok(conjuncts
            .into_iter()
            .reduce(|a, b| binary(a, Operator::And, b))
            .unwrap_or_else(|| lit(true)))
    }
}

impl BuildKeys {
    /// The Bloom filter of the build keys over `probe_keys`, unless every
    /// key is already listed exactly (`IN`), or the probe keys' types
    /// differ from the build keys' (their bytes would differ too).
    fn membership(
        &mut self,
        probe_keys: &[Arc<dyn PhysicalExpr>],
        probe_schema: &Schema,
    ) -> Result<Option<Arc<dyn PhysicalExpr>>> {
        if self.keys.iter().all(|key| key.listed(self.max_listed)) {
            return Ok(None);
        }
        let probe_types = probe_keys
            .iter()
            .map(|key| key.data_type(probe_schema))
            .collect::<Result<Vec<_>>>()?;
        if probe_types != self.types {
            return Ok(None);
        }
        let Some(bloom) = self.bloom.take().and_then(KeyBloomBuilder::finish) else {
            return Ok(None);
        };
        Ok(Some(Arc::new(KeyBloomExpr::new(
            probe_keys.to_vec(),
            Arc::new(bloom),
        ))))
    }
}

/// Types whose values convert to i64 exactly, in order.
pub fn is_integral(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::UInt8
            | DataType::UInt16
            | DataType::UInt32
            | DataType::Date32
    )
}

/// At most `MAX_RANGES` closed ranges covering every value of `distinct`
/// (sorted, non-empty), split at the widest gaps between neighbours.
fn integer_ranges(distinct: &BTreeSet<i64>) -> Vec<(i64, i64)> {
    let values: Vec<i64> = distinct.iter().copied().collect();
    // The indices i whose gap to values[i + 1] is among the widest.
    let mut gaps: Vec<(u64, usize)> = values
        .windows(2)
        .enumerate()
        .map(|(i, pair)| (pair[1].abs_diff(pair[0]), i))
        .collect();
    gaps.sort_unstable_by(|a, b| b.cmp(a));
    let mut splits: Vec<usize> = gaps
        .into_iter()
        .take(MAX_RANGES - 1)
        .filter(|(gap, _)| *gap > 1)
        .map(|(_, i)| i)
        .collect();
    splits.sort_unstable();
    let mut ranges = Vec::with_capacity(splits.len() + 1);
    let mut start = 0;
    for split in splits {
        ranges.push((values[start], values[split]));
        start = split + 1;
    }
    if let Some(last) = values.last() {
        ranges.push((values[start], *last));
    }
    ranges
}

/// `low <= key <= high`, written as two comparisons even for one value:
/// an equality would make the Parquet reader load the bloom filter of
/// every row group for the key's column (TPC-H q20 at SF1: 170 ms against
/// 2 ms), and ranges prune by the statistics alone.
fn within(
    key: &Arc<dyn PhysicalExpr>,
    low: ScalarValue,
    high: ScalarValue,
) -> Arc<dyn PhysicalExpr> {
    binary(
        binary(Arc::clone(key), Operator::GtEq, lit(low)),
        Operator::And,
        binary(Arc::clone(key), Operator::LtEq, lit(high)),
    )
}

fn binary(
    left: Arc<dyn PhysicalExpr>,
    op: Operator,
    right: Arc<dyn PhysicalExpr>,
) -> Arc<dyn PhysicalExpr> {
    Arc::new(BinaryExpr::new(left, op, right))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Int32Array, RecordBatch, StringArray};
    use datafusion::arrow::datatypes::Field;
    use datafusion::physical_expr::expressions::col;

    fn probe_schema() -> Schema {
        Schema::new(vec![
            Field::new("k", DataType::Int32, true),
            Field::new("s", DataType::Utf8, true),
        ])
    }

    /// Which of `probe` the filter keeps.
    fn kept(filter: &Arc<dyn PhysicalExpr>, probe: Vec<Option<i32>>) -> Vec<Option<i32>> {
        let n = probe.len();
        let batch = RecordBatch::try_new(
            Arc::new(probe_schema()),
            vec![
                Arc::new(Int32Array::from(probe.clone())),
                Arc::new(StringArray::from(vec!["x"; n])),
            ],
        )
        .unwrap();
        let mask = filter.evaluate(&batch).unwrap().into_array(n).unwrap();
        let mask = mask.as_boolean();
        probe
            .into_iter()
            .enumerate()
            .filter(|(i, _)| mask.is_valid(*i) && mask.value(*i))
            .map(|(_, v)| v)
            .collect()
    }

    #[test]
    fn keeps_every_matching_probe_key_and_drops_the_gaps() {
        let schema = probe_schema();
        let mut keys = BuildKeys::new(&[DataType::Int32], Membership::PRUNING).unwrap();
        // Two clusters far apart, and a NULL build key (matches nothing).
        let build: ArrayRef = Arc::new(Int32Array::from(vec![
            Some(10),
            Some(12),
            None,
            Some(1000),
            Some(11),
        ]));
        keys.update(&[build]).unwrap();
        let filter = keys
            .probe_filter(&[col("k", &schema).unwrap()], &schema)
            .unwrap();
        let probe = vec![
            Some(9),
            Some(10),
            Some(11),
            Some(12),
            Some(500),
            Some(1000),
            None,
        ];
        assert_eq!(
            kept(&filter, probe),
            vec![Some(10), Some(11), Some(12), Some(1000)]
        );
    }

    #[test]
    fn many_sparse_keys_fit_in_few_ranges_that_still_cover_them() {
        let schema = probe_schema();
        let mut keys = BuildKeys::new(&[DataType::Int32], Membership::PRUNING).unwrap();
        let build: Vec<i32> = (0..500).map(|i| i * 37 % 10_007 * 3).collect();
        keys.update(&[Arc::new(Int32Array::from(build.clone())) as ArrayRef])
            .unwrap();
        let filter = keys
            .probe_filter(&[col("k", &schema).unwrap()], &schema)
            .unwrap();
        let probe: Vec<Option<i32>> = (0..31_000).map(Some).collect();
        let kept = kept(&filter, probe);
        for value in &build {
            assert!(kept.contains(&Some(*value)), "{value} dropped");
        }
        assert!(kept.len() < 31_000, "the filter keeps everything");
    }

    #[test]
    fn an_empty_or_all_null_build_side_keeps_nothing() {
        let schema = probe_schema();
        for build in [vec![], vec![None, None]] {
            let mut keys = BuildKeys::new(&[DataType::Int32], Membership::PRUNING).unwrap();
            keys.update(&[Arc::new(Int32Array::from(build)) as ArrayRef])
                .unwrap();
            let filter = keys
                .probe_filter(&[col("k", &schema).unwrap()], &schema)
                .unwrap();
            assert!(kept(&filter, vec![Some(1), None]).is_empty());
        }
    }

    #[test]
    fn many_build_keys_are_also_filtered_by_membership_unless_types_differ() {
        let schema = probe_schema();
        let build: Vec<i32> = (0..10_000).map(|i| i * 5).collect();
        let probe_key = [col("k", &schema).unwrap()];
        let filter_of = |membership: bool, types: &[DataType]| {
            let mut keys = BuildKeys::new(types, Membership::over_stage_reads(membership)).unwrap();
            let column = Arc::new(Int32Array::from(build.clone())) as ArrayRef;
            keys.update(&[cast(&column, &types[0]).unwrap()]).unwrap();
            keys.probe_filter(&probe_key, &schema).unwrap()
        };
        let with_bloom = filter_of(true, &[DataType::Int32]);
        let probe: Vec<Option<i32>> = (0..50_000).map(Some).collect();
        let kept = kept(&with_bloom, probe.clone());
        assert!(build.iter().all(|k| kept.contains(&Some(*k))));
        assert!(kept.len() < 10_000 + 800, "{} kept", kept.len());
        // Without membership (a filter only pruning scans), or when the
        // build keys' bytes would not be the probe keys': ranges only.
        for filter in [
            filter_of(false, &[DataType::Int32]),
            filter_of(true, &[DataType::Int64]),
        ] {
            assert!(!filter.to_string().contains("bloom"), "{filter}");
        }
    }

    #[test]
    fn a_filter_in_its_own_task_lists_many_keys_when_a_bitmap_holds_them() {
        let schema = probe_schema();
        let probe_key = [col("k", &schema).unwrap()];
        let filter_of = |membership: Membership, build: &[i32]| {
            let mut keys = BuildKeys::new(&[DataType::Int32], membership).unwrap();
            keys.update(&[Arc::new(Int32Array::from(build.to_vec())) as ArrayRef])
                .unwrap();
            keys.probe_filter(&probe_key, &schema).unwrap()
        };
        // 13,000 keys, one in seven, past what a filter sent away lists.
        let build: Vec<i32> = (0..13_000).map(|i| i * 7).collect();
        let in_task = filter_of(Membership::IN_TASK, &build);
        let probe: Vec<Option<i32>> = (0..100_000).map(Some).collect();
        let expected: Vec<Option<i32>> = build.iter().map(|k| Some(*k)).collect();
        assert_eq!(kept(&in_task, probe.clone()), expected);
        let pruning = filter_of(Membership::PRUNING, &build);
        assert!(kept(&pruning, probe).len() > 90_000, "{pruning}");
        // Keys filling their span: their ranges already keep only them.
        let dense: Vec<i32> = (1..=10_000).collect();
        let in_task = filter_of(Membership::IN_TASK, &dense);
        assert!(!in_task.to_string().contains("IN (SET)"), "{in_task}");
        // Keys spread wider than a bitmap: ranges only, as before.
        let wide: Vec<i32> = (0..13_000).map(|i| i * 1_000).collect();
        let in_task = filter_of(Membership::IN_TASK, &wide);
        let probe: Vec<Option<i32>> = (0..13_000_000).step_by(500).map(Some).collect();
        assert!(kept(&in_task, probe).len() > 13_000, "{in_task}");
    }

    #[test]
    fn non_integer_keys_are_filtered_by_their_range() {
        let schema = probe_schema();
        let mut keys = BuildKeys::new(&[DataType::Utf8], Membership::PRUNING).unwrap();
        keys.update(&[Arc::new(StringArray::from(vec!["b", "d"])) as ArrayRef])
            .unwrap();
        let filter = keys
            .probe_filter(&[col("s", &schema).unwrap()], &schema)
            .unwrap();
        let batch = RecordBatch::try_new(
            Arc::new(schema),
            vec![
                Arc::new(Int32Array::from(vec![1, 2, 3])),
                Arc::new(StringArray::from(vec!["a", "c", "e"])),
            ],
        )
        .unwrap();
        let mask = filter.evaluate(&batch).unwrap().into_array(3).unwrap();
        let mask = mask.as_boolean();
        assert_eq!(
            (0..3).map(|i| mask.value(i)).collect::<Vec<_>>(),
            vec![false, true, false]
        );
    }
}
