//! Writing from the tasks: the tasks that compute a statement's rows write
//! them as part files straight into a created table's store
//! (`TableWriteExec`), and the coordinator commits the files they report;
//! COPY and INSERT into external tables run DataFusion's file sinks in
//! every task (`SinkWriteExec`). The files' format is
//! `squadron_storage::format`.

pub mod sink_write;
pub mod table_write;

pub use sink_write::SinkWriteExec;
pub use table_write::{PartitionWriter, RowFlag, TableWriteExec, WriteTarget};
