//! An in-memory object store for the warehouse's tests, with the ways a
//! real store misbehaves switched on at will.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::StreamExt;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult,
};

pub type Hook = Box<dyn FnOnce() -> BoxFuture<'static, ()> + Send>;

/// An in-memory store whose writes fail while `failing` is set (a full
/// disk, an unreachable store), or land but are answered with an error
/// while `losing_answers` is (a connection cut before the answer); that
/// lists every file as a second older than it is while `listing_behind`
/// is (S3-compatible stores list times in whole seconds; a store's clock
/// may run behind the coordinator's); and that runs `on_list` once, when
/// table files are first listed.
#[derive(Default)]
pub struct TestStore {
    pub inner: Arc<InMemory>,
    pub failing: AtomicBool,
    pub losing_answers: AtomicBool,
    pub listing_behind: AtomicBool,
    pub on_list: Mutex<Option<Hook>>,
}

impl std::fmt::Debug for TestStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TestStore")
    }
}

impl std::fmt::Display for TestStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TestStore")
    }
}

impl TestStore {
    fn refuse(&self) -> object_store::Result<()> {
        if self.failing.load(Ordering::SeqCst) {
            return Err(object_store::Error::Generic {
                store: "test",
                source: "the store is down".into(),
            });
        }
        Ok(())
    }
}

#[async_trait]
impl ObjectStore for TestStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.refuse()?;
        let put = self.inner.put_opts(location, payload, opts).await?;
        if self.losing_answers.load(Ordering::SeqCst) {
            return Err(object_store::Error::Generic {
                store: "test",
                source: "connection reset before the answer".into(),
            });
        }
        Ok(put)
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.refuse()?;
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
        let behind = self.listing_behind.load(Ordering::SeqCst);
        let inner = Arc::clone(&self.inner);
        let prefix = prefix.cloned();
        futures::stream::once(async move {
            if let Some(hook) = hook {
                hook().await;
            }
        })
        .flat_map(move |()| inner.list(prefix.as_ref()))
        .map(move |meta| {
            meta.map(|mut meta| {
                if behind {
                    meta.last_modified -= chrono::Duration::seconds(1);
                }
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
        self.refuse()?;
        self.inner.copy_opts(from, to, options).await
    }
}
