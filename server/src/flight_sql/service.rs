//! The Flight SQL front end: what outside clients (ADBC, JDBC, pyarrow)
//! talk to.

use std::pin::Pin;
use std::sync::Arc;

use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_server::FlightService;
use arrow_flight::sql::metadata::SqlInfoData;
use arrow_flight::sql::server::FlightSqlService;
use arrow_flight::sql::server::PeekableFlightDataStream;
use arrow_flight::sql::{
    ActionCancelQueryRequest, ActionCancelQueryResult, ActionClosePreparedStatementRequest,
    ActionCreatePreparedStatementRequest, ActionCreatePreparedStatementResult, Any,
    CommandGetCatalogs, CommandGetCrossReference, CommandGetDbSchemas, CommandGetExportedKeys,
    CommandGetImportedKeys, CommandGetPrimaryKeys, CommandGetSqlInfo, CommandGetTableTypes,
    CommandGetTables, CommandGetXdbcTypeInfo, CommandPreparedStatementQuery,
    CommandPreparedStatementUpdate, CommandStatementIngest, CommandStatementQuery,
    CommandStatementUpdate, DoPutPreparedStatementResult, ProstMessageExt, SqlInfo,
    TicketStatementQuery,
};
use arrow_flight::{
    Action, CancelFlightInfoRequest, CancelFlightInfoResult, CancelStatus, IpcMessage, SchemaAsIpc,
};
use arrow_flight::{
    FlightDescriptor, FlightEndpoint, FlightInfo, HandshakeRequest, HandshakeResponse, Ticket,
};
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::arrow::ipc::writer::IpcWriteOptions;
use futures::{Stream, StreamExt, TryStreamExt};
use prost::Message;
use tonic::{Request, Response, Status, Streaming};

use super::metadata;
use super::prepared::{Prepared, PreparedStore};
use super::statements::StatementStore;
use crate::coordinator::{Coordinator, PlannedQuery};
use crate::output::encode_batches;
use crate::updates::ingest::ingest;
use crate::updates::{is_update, run_update};
use datafusion::logical_expr::LogicalPlan;

pub struct SquadronFlightSql {
    coordinator: Arc<Coordinator>,
    statements: StatementStore,
    prepared: PreparedStore,
    sql_info: SqlInfoData,
}

impl SquadronFlightSql {
    pub fn new(coordinator: Arc<Coordinator>) -> Self {
        Self {
            coordinator,
            statements: StatementStore::default(),
            prepared: PreparedStore::default(),
            sql_info: super::sql_info::sql_info(),
        }
    }

    /// Keeps a planned statement for its DoGet and describes it: one
    /// endpoint without a location, so clients read through the connection
    /// they already have.
    fn statement_info(
        &self,
        planned: PlannedQuery,
        descriptor: FlightDescriptor,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = planned.schema.clone();
        let handle = self.statements.insert(planned)?;
        let ticket = TicketStatementQuery {
            statement_handle: handle.into_bytes().into(),
        };
        let endpoint =
            FlightEndpoint::new().with_ticket(Ticket::new(ticket.as_any().encode_to_vec()));
        let info = FlightInfo::new()
            .try_with_schema(schema.as_ref())
            .map_err(|e| Status::internal(format!("encoding the result schema: {e}")))?
            .with_endpoint(endpoint)
            .with_descriptor(descriptor)
            .with_total_records(-1)
            .with_ordered(true);
        Ok(Response::new(info))
    }

    /// Cancels the statements `info`'s tickets name: one not fetched yet
    /// is dropped, a running one stopped on every worker.
    fn cancel(&self, info: &FlightInfo) -> CancelStatus {
        let mut status = CancelStatus::NotCancellable;
        for ticket in info.endpoint.iter().filter_map(|e| e.ticket.as_ref()) {
            let handle = Any::decode(ticket.ticket.clone())
                .ok()
                .and_then(|any| any.unpack::<TicketStatementQuery>().ok().flatten())
                .and_then(|t| String::from_utf8(t.statement_handle.to_vec()).ok());
            if let Some(handle) = handle {
                if self.statements.discard(&handle) || self.coordinator.cancel(&handle) {
                    status = CancelStatus::Cancelled;
                }
            }
        }
        status
    }

    /// Runs DDL/DML statements (one per bound parameter row); returns the
    /// rows they wrote.
    async fn run_updates(&self, plans: Vec<LogicalPlan>) -> Result<i64, Status> {
        let mut total = 0;
        for plan in plans {
            if !is_update(&plan) {
                return Err(Status::invalid_argument(
                    "not a DDL or DML statement: run queries with GetFlightInfo and DoGet",
                ));
            }
            total += run_update(&self.coordinator, plan).await?;
        }
        Ok(total as i64)
    }

    /// Describes a metadata answer computed on the coordinator: its ticket
    /// is the command itself, answered again by DoGet.
    fn command_info(
        &self,
        command: impl ProstMessageExt,
        schema: &Schema,
        descriptor: FlightDescriptor,
    ) -> Result<Response<FlightInfo>, Status> {
        let endpoint =
            FlightEndpoint::new().with_ticket(Ticket::new(command.as_any().encode_to_vec()));
        let info = FlightInfo::new()
            .try_with_schema(schema)
            .map_err(|e| Status::internal(format!("encoding the result schema: {e}")))?
            .with_endpoint(endpoint)
            .with_descriptor(descriptor)
            .with_total_records(-1);
        Ok(Response::new(info))
    }
}

/// The Flight RPC action that cancels a FlightInfo's query.
const CANCEL_FLIGHT_INFO: &str = "CancelFlightInfo";

/// The parameter batches of a DoPut.
async fn read_batches(stream: PeekableFlightDataStream) -> Result<Vec<RecordBatch>, Status> {
    FlightRecordBatchStream::new_from_flight_data(stream.map_err(FlightError::from))
        .try_collect()
        .await
        .map_err(|e| Status::invalid_argument(format!("reading the parameter batches: {e}")))
}

/// A metadata answer as a DoGet stream.
fn batch_stream(batch: RecordBatch) -> Response<FlightDataStream> {
    let schema = batch.schema();
    Response::new(encode_batches(
        schema,
        futures::stream::once(async { Ok(batch) }),
    ))
}

/// A schema as the IPC bytes Flight SQL carries in prepared statement
/// results; none at all for an empty schema (a statement without rows or
/// without parameters), which every client reads as "no columns".
fn schema_bytes(schema: &SchemaRef) -> Result<prost::bytes::Bytes, Status> {
    if schema.fields().is_empty() {
        return Ok(Default::default());
    }
    let message: IpcMessage = SchemaAsIpc::new(schema, &IpcWriteOptions::default())
        .try_into()
        .map_err(|e| Status::internal(format!("encoding a schema: {e}")))?;
    Ok(message.0)
}

type FlightDataStream = <SquadronFlightSql as FlightService>::DoGetStream;

#[tonic::async_trait]
impl FlightSqlService for SquadronFlightSql {
    type FlightService = SquadronFlightSql;

    async fn do_handshake(
        &self,
        _request: Request<Streaming<HandshakeRequest>>,
    ) -> Result<
        Response<Pin<Box<dyn Stream<Item = Result<HandshakeResponse, Status>> + Send>>>,
        Status,
    > {
        // No authentication yet: every handshake succeeds.
        let response = HandshakeResponse {
            protocol_version: 0,
            payload: Default::default(),
        };
        Ok(Response::new(
            futures::stream::once(async { Ok(response) }).boxed(),
        ))
    }

    async fn get_flight_info_statement(
        &self,
        query: CommandStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let planned = self.coordinator.plan(&query.query).await?;
        self.statement_info(planned, request.into_inner())
    }

    async fn do_action_create_prepared_statement(
        &self,
        query: ActionCreatePreparedStatementRequest,
        _request: Request<Action>,
    ) -> Result<ActionCreatePreparedStatementResult, Status> {
        let plan = self.coordinator.logical_plan(&query.query).await?;
        let prepared = Prepared::new(plan)?;
        let dataset_schema = schema_bytes(&prepared.dataset)?;
        let parameter_schema = schema_bytes(&prepared.parameters)?;
        let handle = self.prepared.insert(prepared)?;
        Ok(ActionCreatePreparedStatementResult {
            prepared_statement_handle: handle.into_bytes().into(),
            dataset_schema,
            parameter_schema,
        })
    }

    async fn do_put_prepared_statement_query(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<DoPutPreparedStatementResult, Status> {
        let batches = read_batches(request.into_inner()).await?;
        self.prepared
            .bind(&query.prepared_statement_handle, &batches)?;
        Ok(DoPutPreparedStatementResult {
            prepared_statement_handle: Some(query.prepared_statement_handle),
        })
    }

    async fn get_flight_info_prepared_statement(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let prepared = self.prepared.get(&query.prepared_statement_handle)?;
        let planned = self
            .coordinator
            .plan_logical(prepared.bound_plan()?)
            .await?;
        self.statement_info(planned, request.into_inner())
    }

    async fn do_get_prepared_statement(
        &self,
        query: CommandPreparedStatementQuery,
        _request: Request<Ticket>,
    ) -> Result<Response<FlightDataStream>, Status> {
        // Our FlightInfo hands out statement tickets; a client may still
        // redeem the command itself.
        let prepared = self.prepared.get(&query.prepared_statement_handle)?;
        let planned = self
            .coordinator
            .plan_logical(prepared.bound_plan()?)
            .await?;
        let job_id = uuid::Uuid::new_v4().to_string();
        let stream = self.coordinator.execute(&job_id, planned).await?;
        Ok(Response::new(stream))
    }

    async fn do_put_statement_update(
        &self,
        command: CommandStatementUpdate,
        _request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        let plan = self.coordinator.logical_plan(&command.query).await?;
        self.run_updates(vec![plan]).await
    }

    async fn do_put_prepared_statement_update(
        &self,
        command: CommandPreparedStatementUpdate,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        let handle = &command.prepared_statement_handle;
        // Parameter rows may come with the update itself (JDBC executeBatch).
        let batches = read_batches(request.into_inner()).await?;
        if batches.iter().any(|b| b.num_columns() > 0) {
            self.prepared.bind(handle, &batches)?;
        }
        let prepared = self.prepared.get(handle)?;
        self.run_updates(prepared.bound_plans()?).await
    }

    async fn do_put_statement_ingest(
        &self,
        command: CommandStatementIngest,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        let mut stream = FlightRecordBatchStream::new_from_flight_data(
            request.into_inner().map_err(FlightError::from),
        );
        let first = stream
            .try_next()
            .await
            .map_err(|e| Status::invalid_argument(format!("reading the ingested rows: {e}")))?;
        let schema = stream
            .schema()
            .cloned()
            .ok_or_else(|| Status::invalid_argument("the ingest sent no schema"))?;
        let rows = futures::stream::iter(first.map(Ok)).chain(
            stream.map_err(|e| Status::invalid_argument(format!("reading the ingested rows: {e}"))),
        );
        let written = ingest(&self.coordinator, &command, schema, rows).await?;
        Ok(written as i64)
    }

    async fn do_action_fallback(
        &self,
        request: Request<Action>,
    ) -> Result<Response<<Self as FlightService>::DoActionStream>, Status> {
        let action = request.into_inner();
        if action.r#type != CANCEL_FLIGHT_INFO {
            return Err(Status::invalid_argument(format!(
                "unknown action {:?}",
                action.r#type
            )));
        }
        let request = CancelFlightInfoRequest::decode(action.body)
            .map_err(|e| Status::invalid_argument(format!("a malformed CancelFlightInfo: {e}")))?;
        let info = request
            .info
            .ok_or_else(|| Status::invalid_argument("CancelFlightInfo names no FlightInfo"))?;
        let result = CancelFlightInfoResult {
            status: self.cancel(&info) as i32,
        };
        let body = arrow_flight::Result {
            body: result.encode_to_vec().into(),
        };
        Ok(Response::new(
            futures::stream::once(async { Ok(body) }).boxed(),
        ))
    }

    async fn do_action_cancel_query(
        &self,
        query: ActionCancelQueryRequest,
        _request: Request<Action>,
    ) -> Result<ActionCancelQueryResult, Status> {
        let info = FlightInfo::decode(query.info)
            .map_err(|e| Status::invalid_argument(format!("a malformed FlightInfo: {e}")))?;
        // ActionCancelQuery's results number like CancelStatus.
        Ok(ActionCancelQueryResult {
            result: self.cancel(&info) as i32,
        })
    }

    async fn do_action_close_prepared_statement(
        &self,
        query: ActionClosePreparedStatementRequest,
        _request: Request<Action>,
    ) -> Result<(), Status> {
        self.prepared.remove(&query.prepared_statement_handle)
    }

    async fn get_flight_info_catalogs(
        &self,
        query: CommandGetCatalogs,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.into_builder().schema();
        self.command_info(query, &schema, request.into_inner())
    }

    async fn do_get_catalogs(
        &self,
        query: CommandGetCatalogs,
        _request: Request<Ticket>,
    ) -> Result<Response<FlightDataStream>, Status> {
        let batch = metadata::catalogs(self.coordinator.session(), query)?;
        Ok(batch_stream(batch))
    }

    async fn get_flight_info_schemas(
        &self,
        query: CommandGetDbSchemas,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.clone().into_builder().schema();
        self.command_info(query, &schema, request.into_inner())
    }

    async fn do_get_schemas(
        &self,
        query: CommandGetDbSchemas,
        _request: Request<Ticket>,
    ) -> Result<Response<FlightDataStream>, Status> {
        let batch = metadata::db_schemas(self.coordinator.session(), query)?;
        Ok(batch_stream(batch))
    }

    async fn get_flight_info_tables(
        &self,
        query: CommandGetTables,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.clone().into_builder().schema();
        self.command_info(query, &schema, request.into_inner())
    }

    async fn do_get_tables(
        &self,
        query: CommandGetTables,
        _request: Request<Ticket>,
    ) -> Result<Response<FlightDataStream>, Status> {
        let batch = metadata::tables(self.coordinator.session(), query).await?;
        Ok(batch_stream(batch))
    }

    async fn get_flight_info_table_types(
        &self,
        query: CommandGetTableTypes,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.into_builder().schema();
        self.command_info(query, &schema, request.into_inner())
    }

    async fn do_get_table_types(
        &self,
        query: CommandGetTableTypes,
        _request: Request<Ticket>,
    ) -> Result<Response<FlightDataStream>, Status> {
        Ok(batch_stream(metadata::table_types(query)?))
    }

    async fn get_flight_info_primary_keys(
        &self,
        query: CommandGetPrimaryKeys,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.command_info(
            query,
            &metadata::primary_keys_schema(),
            request.into_inner(),
        )
    }

    async fn do_get_primary_keys(
        &self,
        _query: CommandGetPrimaryKeys,
        _request: Request<Ticket>,
    ) -> Result<Response<FlightDataStream>, Status> {
        Ok(batch_stream(RecordBatch::new_empty(
            metadata::primary_keys_schema(),
        )))
    }

    async fn get_flight_info_exported_keys(
        &self,
        query: CommandGetExportedKeys,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.command_info(
            query,
            &metadata::foreign_keys_schema(),
            request.into_inner(),
        )
    }

    async fn do_get_exported_keys(
        &self,
        _query: CommandGetExportedKeys,
        _request: Request<Ticket>,
    ) -> Result<Response<FlightDataStream>, Status> {
        Ok(batch_stream(RecordBatch::new_empty(
            metadata::foreign_keys_schema(),
        )))
    }

    async fn get_flight_info_imported_keys(
        &self,
        query: CommandGetImportedKeys,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.command_info(
            query,
            &metadata::foreign_keys_schema(),
            request.into_inner(),
        )
    }

    async fn do_get_imported_keys(
        &self,
        _query: CommandGetImportedKeys,
        _request: Request<Ticket>,
    ) -> Result<Response<FlightDataStream>, Status> {
        Ok(batch_stream(RecordBatch::new_empty(
            metadata::foreign_keys_schema(),
        )))
    }

    async fn get_flight_info_cross_reference(
        &self,
        query: CommandGetCrossReference,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.command_info(
            query,
            &metadata::foreign_keys_schema(),
            request.into_inner(),
        )
    }

    async fn do_get_cross_reference(
        &self,
        _query: CommandGetCrossReference,
        _request: Request<Ticket>,
    ) -> Result<Response<FlightDataStream>, Status> {
        Ok(batch_stream(RecordBatch::new_empty(
            metadata::foreign_keys_schema(),
        )))
    }

    async fn get_flight_info_xdbc_type_info(
        &self,
        query: CommandGetXdbcTypeInfo,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = metadata::XDBC_TYPES.schema();
        self.command_info(query, &schema, request.into_inner())
    }

    async fn do_get_xdbc_type_info(
        &self,
        query: CommandGetXdbcTypeInfo,
        _request: Request<Ticket>,
    ) -> Result<Response<FlightDataStream>, Status> {
        let batch = query
            .into_builder(&metadata::XDBC_TYPES)
            .build()
            .map_err(|e| Status::internal(format!("building type info: {e}")))?;
        Ok(batch_stream(batch))
    }

    async fn do_get_statement(
        &self,
        ticket: TicketStatementQuery,
        _request: Request<Ticket>,
    ) -> Result<Response<FlightDataStream>, Status> {
        let handle = std::str::from_utf8(&ticket.statement_handle)
            .map_err(|_| Status::invalid_argument("the statement handle is not UTF-8"))?;
        let planned = self.statements.take(handle)?;
        let stream = self.coordinator.execute(handle, planned).await?;
        Ok(Response::new(stream))
    }

    async fn get_flight_info_sql_info(
        &self,
        query: CommandGetSqlInfo,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.clone().into_builder(&self.sql_info).schema();
        let endpoint =
            FlightEndpoint::new().with_ticket(Ticket::new(query.as_any().encode_to_vec()));
        let info = FlightInfo::new()
            .try_with_schema(schema.as_ref())
            .map_err(|e| Status::internal(format!("encoding the SqlInfo schema: {e}")))?
            .with_endpoint(endpoint)
            .with_descriptor(request.into_inner());
        Ok(Response::new(info))
    }

    async fn do_get_sql_info(
        &self,
        query: CommandGetSqlInfo,
        _request: Request<Ticket>,
    ) -> Result<Response<FlightDataStream>, Status> {
        let builder = query.into_builder(&self.sql_info);
        let schema = builder.schema();
        let batch = builder.build();
        let stream = FlightDataEncoderBuilder::new()
            .with_schema(schema)
            .build(futures::stream::once(async { batch }))
            .map_err(Status::from);
        Ok(Response::new(stream.boxed()))
    }

    async fn register_sql_info(&self, _id: i32, _result: &SqlInfo) {}
}
