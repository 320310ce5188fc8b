//! Commits of `WarehouseCatalog` against an object store that can be made
//! to fail, and two coordinators sharing one warehouse.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::prelude::SessionContext;
use object_store::ObjectStore;

use super::changes::Change;
use super::janitor::{Janitor, JanitorOptions};
use super::test_store::TestStore;
use super::{Warehouse, WarehouseCatalog};
use crate::catalog::persisted::{encode_schema, DataFile, Entry, Managed};
use squadron_storage::managed_table::ManagedTable;

/// A coordinator's context whose `memory://` store is `store`.
fn context(store: &Arc<TestStore>) -> SessionContext {
    let runtime = RuntimeEnv::default();
    let url = url::Url::parse("memory://").unwrap();
    runtime.register_object_store(&url, Arc::clone(store) as Arc<dyn ObjectStore>);
    SessionContext::new_with_config_rt(Default::default(), Arc::new(runtime))
}

async fn open(ctx: &SessionContext) -> Arc<WarehouseCatalog> {
    let runtime = ctx.runtime_env();
    let warehouse = Warehouse::open("memory:///wh/", &runtime).unwrap();
    let janitor = Janitor::new(runtime, JanitorOptions::default());
    WarehouseCatalog::open(warehouse, None, janitor, ctx)
        .await
        .unwrap()
}

fn file(name: &str) -> DataFile {
    DataFile {
        name: name.into(),
        bytes: 10,
        rows: 1,
    }
}

fn table(name: &str, files: &[&str]) -> Managed {
    let schema = Arc::new(Schema::new(vec![Field::new("a", DataType::Int64, true)]));
    Managed {
        name: name.into(),
        id: format!("{name}-id"),
        location: format!("tables/{name}/"),
        format: "parquet".into(),
        schema: encode_schema(&schema).unwrap(),
        files: files.iter().map(|f| file(f)).collect(),
        keys: vec![],
        defaults: vec![],
    }
}

fn append(name: &str, files: &[&str]) -> Change {
    Change::Append {
        name: name.into(),
        id: format!("{name}-id"),
        files: files.iter().map(|f| file(f)).collect(),
    }
}

/// The files the table registered as `name` reads now.
async fn registered_files(ctx: &SessionContext, name: &str) -> Option<Vec<String>> {
    let provider = ctx.table_provider(name).await.ok()?;
    let table = provider.downcast_ref::<ManagedTable>()?;
    Some(table.files().files.iter().map(|f| f.name.clone()).collect())
}

fn committed_files(catalog: &WarehouseCatalog, name: &str) -> Option<Vec<String>> {
    match catalog.get(name)? {
        Entry::Managed(table) => Some(table.files.iter().map(|f| f.name.clone()).collect()),
        _ => None,
    }
}

#[tokio::test]
async fn a_commit_that_fails_changes_nothing_shown_or_kept() {
    let store = Arc::new(TestStore::default());
    let ctx = context(&store);
    let catalog = open(&ctx).await;
    let create = Change::Create {
        table: table("t", &["a"]),
        replace: false,
    };
    catalog.commit(&ctx, create).await.unwrap();
    let version = catalog.current().version;

    store.failing.store(true, Ordering::SeqCst);
    let err = catalog.commit(&ctx, append("t", &["b"])).await.unwrap_err();
    assert_eq!(
        err.kind(),
        squadron_common::error::ErrorKind::Unavailable,
        "{err}"
    );
    let drop = Change::Remove {
        names: vec!["t".into()],
    };
    catalog.commit(&ctx, drop).await.unwrap_err();
    assert_eq!(catalog.current().version, version);
    assert_eq!(committed_files(&catalog, "t").unwrap(), vec!["a"]);
    assert_eq!(registered_files(&ctx, "t").await.unwrap(), vec!["a"]);

    // A restart (another context over the same store) shows the same.
    store.failing.store(false, Ordering::SeqCst);
    let restarted = context(&store);
    let reopened = open(&restarted).await;
    assert_eq!(reopened.current().version, version);
    assert_eq!(registered_files(&restarted, "t").await.unwrap(), vec!["a"]);
    // And the store back, the next commit goes through.
    catalog.commit(&ctx, append("t", &["c"])).await.unwrap();
    assert_eq!(registered_files(&ctx, "t").await.unwrap(), vec!["a", "c"]);
}

#[tokio::test]
async fn a_commit_whose_answer_was_lost_counts_as_made() {
    let store = Arc::new(TestStore::default());
    let ctx = context(&store);
    let catalog = open(&ctx).await;
    let create = Change::Create {
        table: table("t", &["a"]),
        replace: false,
    };
    catalog.commit(&ctx, create).await.unwrap();

    // The version lands and the store's answer is lost: the statement
    // succeeds once, not twice (an append applied again would name its
    // files twice) and not never (its files would be removed).
    store.losing_answers.store(true, Ordering::SeqCst);
    catalog.commit(&ctx, append("t", &["b"])).await.unwrap();
    store.losing_answers.store(false, Ordering::SeqCst);
    assert_eq!(committed_files(&catalog, "t").unwrap(), vec!["a", "b"]);
    assert_eq!(registered_files(&ctx, "t").await.unwrap(), vec!["a", "b"]);
    let restarted = context(&store);
    let reopened = open(&restarted).await;
    assert_eq!(reopened.current().version, catalog.current().version);
    assert_eq!(
        registered_files(&restarted, "t").await.unwrap(),
        vec!["a", "b"]
    );
}

#[tokio::test]
async fn two_coordinators_appending_at_once_both_take_effect() {
    let store = Arc::new(TestStore::default());
    let (one, two) = (context(&store), context(&store));
    let first = open(&one).await;
    let create = Change::Create {
        table: table("t", &[]),
        replace: false,
    };
    first.commit(&one, create).await.unwrap();
    let second = open(&two).await;
    let provider = one.table_provider("t").await.unwrap();

    // Each appends from the version it knows; the later one loses the race
    // for that version number, takes the other's in and applies again.
    let appends = (0..8).map(|i| {
        let (catalog, ctx) = if i % 2 == 0 {
            (Arc::clone(&first), one.clone())
        } else {
            (Arc::clone(&second), two.clone())
        };
        tokio::spawn(async move {
            let name = format!("f{i}");
            catalog.commit(&ctx, append("t", &[name.as_str()])).await
        })
    });
    for done in futures::future::join_all(appends).await {
        done.unwrap().unwrap();
    }
    first.refresh(&one).await.unwrap();
    second.refresh(&two).await.unwrap();
    for (catalog, ctx) in [(&first, &one), (&second, &two)] {
        let mut files = registered_files(ctx, "t").await.unwrap();
        files.sort();
        assert_eq!(files, (0..8).map(|i| format!("f{i}")).collect::<Vec<_>>());
        assert_eq!(catalog.current().version, 9);
    }
    // The table stayed registered as the same provider: its files were
    // swapped in place.
    let after = one.table_provider("t").await.unwrap();
    assert!(Arc::ptr_eq(&provider, &after));
}

#[tokio::test]
async fn a_dropped_table_goes_and_a_replaced_one_reads_its_own_files() {
    let store = Arc::new(TestStore::default());
    let ctx = context(&store);
    let catalog = open(&ctx).await;
    let create = |files: &[&str], replace| Change::Create {
        table: table("t", files),
        replace,
    };
    catalog.commit(&ctx, create(&["a"], false)).await.unwrap();
    let err = catalog
        .commit(&ctx, create(&["b"], false))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), squadron_common::error::ErrorKind::AlreadyExists);
    catalog.commit(&ctx, create(&["b"], true)).await.unwrap();
    assert_eq!(registered_files(&ctx, "t").await.unwrap(), vec!["b"]);
    let drop = Change::Remove {
        names: vec!["t".into()],
    };
    catalog.commit(&ctx, drop).await.unwrap();
    assert!(ctx.table_provider("t").await.is_err());
    assert!(catalog.get("t").is_none());
}

#[tokio::test]
async fn a_corrupt_catalog_version_stops_the_start_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("catalog")).unwrap();
    let file = dir
        .path()
        .join("catalog")
        .join("v00000000000000000003.json");
    std::fs::write(&file, "{not json").unwrap();
    let ctx = SessionContext::new();
    let runtime = ctx.runtime_env();
    let warehouse = Warehouse::open(dir.path().to_str().unwrap(), &runtime).unwrap();
    let janitor = Janitor::new(runtime, JanitorOptions::default());
    let err = WarehouseCatalog::open(warehouse, None, janitor, &ctx)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("v00000000000000000003.json"), "{err}");
    assert!(err.contains("cannot be read"), "{err}");
}
