//! The sweep against a store whose timestamps cannot be trusted to the
//! second, with a write starting while the sweep runs.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::prelude::SessionContext;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

use super::changes::Change;
use super::janitor::{Janitor, JanitorOptions};
use super::sweep::sweep;
use super::test_store::TestStore;
use super::{Warehouse, WarehouseCatalog};
use crate::catalog::persisted::{encode_schema, DataFile, Managed};

#[tokio::test]
async fn a_write_that_starts_while_the_sweep_runs_keeps_its_files() {
    let store = Arc::new(TestStore::default());
    store.listing_behind.store(true, Ordering::SeqCst);
    let runtime = RuntimeEnv::default();
    let url = url::Url::parse("memory://").unwrap();
    runtime.register_object_store(&url, Arc::clone(&store) as Arc<dyn ObjectStore>);
    let ctx = SessionContext::new_with_config_rt(Default::default(), Arc::new(runtime));
    let runtime = ctx.runtime_env();
    let warehouse = Warehouse::open("memory:///wh/", &runtime).unwrap();
    // No grace: the sweep may take any unnamed file nobody writes.
    let options = JanitorOptions {
        retention: Duration::from_secs(3600),
        sweep_interval: Duration::ZERO,
        sweep_grace: Duration::ZERO,
    };
    let catalog = WarehouseCatalog::open(warehouse, None, Janitor::new(runtime, options), &ctx)
        .await
        .unwrap();
    let schema = Arc::new(Schema::new(vec![Field::new("a", DataType::Int64, true)]));
    let table = Managed {
        name: "t".into(),
        id: "1".into(),
        location: "tables/t-1/".into(),
        format: "parquet".into(),
        schema: encode_schema(&schema).unwrap(),
        files: vec![],
        keys: vec![],
        defaults: vec![],
    };
    catalog
        .commit(
            &ctx,
            Change::Create {
                table,
                replace: false,
            },
        )
        .await
        .unwrap();

    // An INSERT starts as the sweep lists: it notes its write, then
    // writes its part file.
    let part = "part-late-00000-0-0.parquet";
    let location = Path::from(format!("wh/tables/t-1/{part}"));
    let (writer, inner, file) = (
        Arc::clone(&catalog),
        Arc::clone(&store.inner),
        location.clone(),
    );
    *store.on_list.lock().unwrap() = Some(Box::new(move || {
        Box::pin(async move {
            writer.started_writing("late");
            inner
                .put(&file, PutPayload::from_static(b"x"))
                .await
                .unwrap();
        })
    }));
    sweep(&catalog).await.unwrap();
    assert!(
        store.inner.head(&location).await.is_ok(),
        "the sweep removed the part file of a write in progress"
    );

    // It commits: the file is named and stays for good.
    let append = Change::Append {
        name: "t".into(),
        id: "1".into(),
        files: vec![DataFile {
            name: part.into(),
            bytes: 1,
            rows: 1,
        }],
    };
    catalog.commit(&ctx, append).await.unwrap();
    catalog.finished_writing("late");
    assert_eq!(sweep(&catalog).await.unwrap().files, 0);
    assert!(store.inner.head(&location).await.is_ok());

    // A file of a write that ended without committing goes.
    let orphan = Path::from("wh/tables/t-1/part-failed-00000-0-0.parquet");
    store
        .inner
        .put(&orphan, PutPayload::from_static(b"x"))
        .await
        .unwrap();
    assert_eq!(sweep(&catalog).await.unwrap().files, 1);
    assert!(store.inner.head(&orphan).await.is_err());
}
