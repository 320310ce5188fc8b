//! One statement through Flight SQL, the way clients run it: GetFlightInfo,
//! then DoGet of each endpoint.

use arrow_flight::sql::client::FlightSqlServiceClient;
use datafusion::arrow::record_batch::RecordBatch;
use futures::{StreamExt, TryStreamExt};
use tonic::transport::Channel;

pub type Client = FlightSqlServiceClient<Channel>;

/// The whole answer.
pub async fn collect(client: &mut Client, sql: &str) -> anyhow::Result<Vec<RecordBatch>> {
    let info = client.execute(sql.to_string(), None).await?;
    let mut all = vec![];
    for endpoint in info.endpoint {
        let ticket = endpoint
            .ticket
            .ok_or_else(|| anyhow::anyhow!("an endpoint without a ticket"))?;
        let mut batches: Vec<RecordBatch> = client.do_get(ticket).await?.try_collect().await?;
        all.append(&mut batches);
    }
    Ok(all)
}

/// Rows and row bytes of the answer, each batch dropped as soon as it is
/// counted (for answers too big to keep).
pub async fn count(client: &mut Client, sql: &str) -> anyhow::Result<(u64, u64)> {
    let info = client.execute(sql.to_string(), None).await?;
    let (mut rows, mut bytes) = (0u64, 0u64);
    for endpoint in info.endpoint {
        let ticket = endpoint
            .ticket
            .ok_or_else(|| anyhow::anyhow!("an endpoint without a ticket"))?;
        let mut stream = client.do_get(ticket).await?;
        while let Some(batch) = stream.next().await {
            let batch = batch?;
            rows += batch.num_rows() as u64;
            bytes += row_bytes(&batch);
        }
    }
    Ok((rows, bytes))
}

/// The bytes of a batch's rows, not of the (shared) buffers they sit in.
fn row_bytes(batch: &RecordBatch) -> u64 {
    batch
        .columns()
        .iter()
        .map(|c| c.to_data().get_slice_memory_size().unwrap_or(0) as u64)
        .sum()
}
