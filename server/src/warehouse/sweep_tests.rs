//! The sweep: what it removes, and what it leaves against a store whose
//! timestamps cannot be trusted to the second, with a write starting
//! while the sweep runs.

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

/// The catalog of the warehouse at `url`, swept with no grace: the sweep
/// may take any unnamed file nobody writes.
/// Table `t` (id 1, one Int64 column) at `tables/t-1/` with `files`.
fn table_t(files: Vec<DataFile>) -> Managed {
    let schema = Arc::new(Schema::new(vec![Field::new("a", DataType::Int64, true)]));
    Managed {
        name: "t".into(),
        id: "1".into(),
        location: "tables/t-1/".into(),
        format: "parquet".into(),
        schema: encode_schema(&schema).unwrap(),
        files,
        keys: vec![],
        defaults: vec![],
    }
}

async fn catalog_without_grace(url: &str, ctx: &SessionContext) -> Arc<WarehouseCatalog> {
    let runtime = ctx.runtime_env();
    let warehouse = Warehouse::open(url, &runtime).unwrap();
    let options = JanitorOptions {
        retention: Duration::from_secs(3600),
        sweep_interval: Duration::ZERO,
        sweep_grace: Duration::ZERO,
    };
    WarehouseCatalog::open(warehouse, None, Janitor::new(runtime, options), ctx)
        .await
        .unwrap()
}

#[tokio::test]
async fn the_sweep_removes_what_no_version_names_and_nobody_writes() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = SessionContext::new();
    let catalog = catalog_without_grace(dir.path().to_str().unwrap(), &ctx).await;
    let table_dir = dir.path().join("tables").join("t-1");
    std::fs::create_dir_all(&table_dir).unwrap();
    let names = [
        "kept.parquet",
        "replaced.parquet",
        "orphan.parquet",
        "part-writing-00000-0-0.parquet",
        "part-gone-00000-0-0.parquet#1",
    ];
    for name in names {
        std::fs::write(table_dir.join(name), b"x").unwrap();
    }
    let file = |name: &str| DataFile {
        name: name.into(),
        bytes: 1,
        rows: 1,
    };
    let table = table_t(vec![file("kept.parquet"), file("replaced.parquet")]);
    let create = Change::Create {
        table,
        replace: false,
    };
    catalog.commit(&ctx, create).await.unwrap();
    // An UPDATE replaced one file: released, kept for the retention.
    let rewrite = Change::Rewrite {
        name: "t".into(),
        id: "1".into(),
        removed: vec!["replaced.parquet".into()],
        added: vec![],
    };
    catalog.commit(&ctx, rewrite).await.unwrap();
    catalog.started_writing("writing");

    let swept = sweep(&catalog).await.unwrap();
    let mut left: Vec<String> = std::fs::read_dir(&table_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    left.sort();
    assert_eq!(
        left,
        vec![
            "kept.parquet",
            "part-writing-00000-0-0.parquet",
            "replaced.parquet"
        ]
    );
    assert_eq!(swept.files, 2);
    // The write ended without committing: the next sweep takes it.
    catalog.finished_writing("writing");
    assert_eq!(sweep(&catalog).await.unwrap().files, 1);
}

#[tokio::test]
async fn a_write_that_starts_while_the_sweep_runs_keeps_its_files() {
    let store = Arc::new(TestStore::default());
    store.listing_behind.store(true, Ordering::SeqCst);
    let runtime = RuntimeEnv::default();
    let url = url::Url::parse("memory://").unwrap();
    runtime.register_object_store(&url, Arc::clone(&store) as Arc<dyn ObjectStore>);
    let ctx = SessionContext::new_with_config_rt(Default::default(), Arc::new(runtime));
    let catalog = catalog_without_grace("memory:///wh/", &ctx).await;
    let table = table_t(vec![]);
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
