//! Batches shaped for a Flight stream (to a client, or to a peer task).
//!
//! gRPC clients commonly refuse messages over 4 MiB, so batches are cut to
//! about a target size before encoding. The size that matters is what the
//! IPC writer sends: the rows of the slice. `get_array_memory_size()`, which
//! the Flight encoder splits by, counts every shared buffer whole: a batch
//! sliced from a large decoded page looked hundreds of times its size and
//! was split into batches of a few dozen rows. So we measure the slice
//! (`real_size`) and cut ourselves; our encoder (`stream::encoder`) never
//! splits again. String/binary *view* arrays are the exception: a
//! slice of one is sent with every data buffer of the original, so batches
//! with view columns are compacted (`gc`) first.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray};
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::record_batch::RecordBatch;

/// Aim well below the common 4 MiB limit, leaving room for the IPC framing.
pub const TARGET_BYTES: usize = 2 * 1024 * 1024;

/// Splits (and compacts view columns of) `batch` so each piece encodes to
/// about `TARGET_BYTES` or less.
pub fn for_flight(batch: RecordBatch) -> Vec<RecordBatch> {
    let batch = if has_view_columns(&batch) {
        compact(&batch)
    } else {
        batch
    };
    let size = real_size(&batch);
    if size <= TARGET_BYTES || batch.num_rows() <= 1 {
        return vec![batch];
    }
    let pieces = size.div_ceil(TARGET_BYTES);
    let rows_per_piece = batch.num_rows().div_ceil(pieces).max(1);
    let views = has_view_columns(&batch);
    (0..batch.num_rows())
        .step_by(rows_per_piece)
        .map(|offset| {
            let len = rows_per_piece.min(batch.num_rows() - offset);
            let piece = batch.slice(offset, len);
            if views {
                compact(&piece)
            } else {
                piece
            }
        })
        .collect()
}

/// The bytes the rows of `batch` occupy (what IPC sends), not counting the
/// parts of shared buffers outside the slice. View arrays count their data
/// buffers whole, since IPC sends them whole.
pub fn real_size(batch: &RecordBatch) -> usize {
    batch
        .columns()
        .iter()
        .map(|col| match col.data_type() {
            DataType::Utf8View | DataType::BinaryView => col.get_array_memory_size(),
            _ => col
                .to_data()
                .get_slice_memory_size()
                .unwrap_or_else(|_| col.get_array_memory_size()),
        })
        .sum()
}

fn has_view_columns(batch: &RecordBatch) -> bool {
    batch
        .schema()
        .fields()
        .iter()
        .any(|f| matches!(f.data_type(), DataType::Utf8View | DataType::BinaryView))
}

/// Copies view columns so their buffers hold only the values they use.
fn compact(batch: &RecordBatch) -> RecordBatch {
    let columns: Vec<ArrayRef> = batch
        .columns()
        .iter()
        .map(|col| match col.data_type() {
            DataType::Utf8View => Arc::new(col.as_string_view().gc()) as ArrayRef,
            DataType::BinaryView => Arc::new(col.as_binary_view().gc()) as ArrayRef,
            _ => Arc::clone(col),
        })
        .collect();
    RecordBatch::try_new(batch.schema(), columns).expect("same schema and columns")
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::StringViewArray;
    use datafusion::arrow::datatypes::{Field, Schema};

    fn views(rows: usize, width: usize) -> RecordBatch {
        let values: Vec<String> = (0..rows).map(|i| format!("{i:0width$}")).collect();
        let schema = Arc::new(Schema::new(vec![Field::new(
            "s",
            DataType::Utf8View,
            false,
        )]));
        let array = StringViewArray::from_iter_values(values.iter());
        RecordBatch::try_new(schema, vec![Arc::new(array)]).unwrap()
    }

    #[test]
    fn large_view_batches_are_cut_into_compact_pieces() {
        let batch = views(20_000, 500); // ~10 MB of string data
        let pieces = for_flight(batch.clone());
        assert!(pieces.len() > 1);
        assert_eq!(pieces.iter().map(|b| b.num_rows()).sum::<usize>(), 20_000);
        for piece in &pieces {
            assert!(piece.get_array_memory_size() <= TARGET_BYTES + TARGET_BYTES / 4);
        }
        let rejoined =
            datafusion::arrow::compute::concat_batches(&batch.schema(), &pieces).unwrap();
        assert_eq!(rejoined, batch);
    }

    #[test]
    fn slices_of_large_arrays_are_measured_by_their_rows() {
        let big = datafusion::arrow::array::Int64Array::from_iter_values(0..1_000_000);
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
        let batch = RecordBatch::try_new(schema, vec![Arc::new(big)]).unwrap();
        let slice = batch.slice(10, 8192);
        assert!(slice.get_array_memory_size() >= 8_000_000, "the overcount");
        assert_eq!(real_size(&slice), 8192 * 8);
        assert_eq!(for_flight(slice.clone()), vec![slice]);
        let pieces = for_flight(batch);
        assert_eq!(pieces.len(), 4, "8 MB cut into 2 MiB pieces");
    }

    #[test]
    fn small_batches_pass_through() {
        let batch = views(10, 5);
        assert_eq!(for_flight(batch.clone()), vec![batch]);
    }
}
