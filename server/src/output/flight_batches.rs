//! Batches shaped for the client's Flight stream.
//!
//! gRPC clients commonly refuse messages over 4 MiB. The Flight encoder
//! splits large batches by slicing them, which works for most arrays but
//! not for string/binary *view* arrays: a slice still carries every data
//! buffer of the original. So batches with view columns are compacted
//! (`gc`) and, when still large, cut into slices that are compacted in turn.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray};
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::record_batch::RecordBatch;

/// Aim well below the common 4 MiB limit, leaving room for the IPC framing.
const TARGET_BYTES: usize = 2 * 1024 * 1024;

/// Splits and compacts `batch` so each piece encodes to about
/// `TARGET_BYTES` or less.
pub fn for_flight(batch: RecordBatch) -> Vec<RecordBatch> {
    if !has_view_columns(&batch) {
        // The encoder splits these itself.
        return vec![batch];
    }
    let batch = compact(&batch);
    let size = batch.get_array_memory_size();
    if size <= TARGET_BYTES || batch.num_rows() <= 1 {
        return vec![batch];
    }
    let pieces = size.div_ceil(TARGET_BYTES);
    let rows_per_piece = batch.num_rows().div_ceil(pieces).max(1);
    (0..batch.num_rows())
        .step_by(rows_per_piece)
        .map(|offset| {
            let len = rows_per_piece.min(batch.num_rows() - offset);
            compact(&batch.slice(offset, len))
        })
        .collect()
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
    fn small_batches_pass_through() {
        let batch = views(10, 5);
        assert_eq!(for_flight(batch.clone()), vec![batch]);
    }
}
