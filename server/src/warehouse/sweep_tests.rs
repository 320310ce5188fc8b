//! The sweep against a store whose timestamps cannot be trusted to the
//! second, with a write starting while the sweep runs.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::prelude::SessionContext;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::StreamExt;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    ObjectStoreExt, PutMultipartOptions, PutOptions, PutPayload, PutResult,
};

use super::changes::Change;
use super::janitor::{Janitor, JanitorOptions};
use super::sweep::sweep;
use super::{Warehouse, WarehouseCatalog};
use crate::catalog::persisted::{encode_schema, DataFile, Managed};

type Hook = Box<dyn FnOnce() -> BoxFuture<'static, ()> + Send>;

/// An in-memory store that lists every file as a second older than it is
/// (S3-compatible stores list times in whole seconds; a store's clock may
/// run behind the coordinator's), and runs `on_list` once, when the table
/// files are first listed: a write starting at that moment.
#[derive(Default)]
struct BehindStore {
    inner: Arc<InMemory>,
    on_list: Mutex<Option<Hook>>,
}

impl std::fmt::Debug for BehindStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BehindStore")
    }
}

impl std::fmt::Display for BehindStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BehindStore")
    }
}

#[async_trait]
impl ObjectStore for BehindStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        let tables = prefix.is_some_and(|p| p.as_ref().ends_with("tables"));
        let hook = if tables {
            self.on_list.lock().unwrap().take()
        } else {
            None
        };
        let inner = Arc::clone(&self.inner);
        let prefix = prefix.cloned();
        futures::stream::once(async move {
            if let Some(hook) = hook {
                hook().await;
            }
        })
        .flat_map(move |()| inner.list(prefix.as_ref()))
        .map(|meta| {
            meta.map(|mut meta| {
                meta.last_modified -= chrono::Duration::seconds(1);
                meta
            })
        })
        .boxed()
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

#[tokio::test]
async fn a_write_that_starts_while_the_sweep_runs_keeps_its_files() {
    let store = Arc::new(BehindStore::default());
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
