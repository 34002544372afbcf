//! Request accounting: how many job-store reads and writes, object-store GETs, PUTs,
//! LISTs and DELETEs and function invocations a task or a query makes — what a query
//! costs on AWS besides compute (DynamoDB, S3 and Lambda bill per request).
//!
//! A task counts its own requests while it runs: its store calls through a counting
//! [`Intercepted`](crate::state::Intercepted) hook ([`count_store_call`]), its object
//! requests through a [`CountingRegistry`] in front of its runtime's object stores (so
//! DataFusion's scans are counted as well as the shuffle) — and records them in its
//! completion record. The scheduler's share is counted the same way at submit (recorded
//! on the job) and derived from the records for the rest (claims, dispatch, wake-ups:
//! [`crate::status`] says which).
//!
//! Object requests are counted as S3 bills them: a ranged read is one GET (reads of
//! nearby ranges are coalesced first, as object_store does for S3), a multipart upload
//! is one PUT to start it, one per part and one to complete it.

use std::fmt;
use std::ops::{Add, AddAssign};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::execution::object_store::ObjectStoreRegistry;
use futures::stream::BoxStream;
use futures::StreamExt;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, UploadPart,
};
use serde::{Deserialize, Serialize};
use url::Url;

/// One kind of billed request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// A job-store read (DynamoDB GetItem, BatchGetItem, Query).
    StoreRead,
    /// A job-store write (DynamoDB PutItem, UpdateItem, TransactWriteItems, ...).
    StoreWrite,
    /// An object GET (whole or ranged, S3 GET / HEAD).
    ObjectGet,
    /// An object PUT (PUT, COPY, multipart start, part and completion).
    ObjectPut,
    /// An object LIST.
    ObjectList,
    /// An object DELETE (per object).
    ObjectDelete,
    /// A function invocation (Lambda Invoke).
    Invocation,
    /// Bytes returned by object GETs (counted in bytes, not requests: what a scan read
    /// is what Athena would bill).
    ObjectGetBytes,
}

const KINDS: usize = 8;

/// Requests of each kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RequestCounts {
    /// Job-store reads (DynamoDB read requests).
    #[serde(default)]
    pub store_reads: u64,
    /// Job-store writes (DynamoDB write requests).
    #[serde(default)]
    pub store_writes: u64,
    /// Object GETs (S3 GET requests).
    #[serde(default)]
    pub object_gets: u64,
    /// Object PUTs (S3 PUT-class requests, multipart parts included).
    #[serde(default)]
    pub object_puts: u64,
    /// Object LISTs (S3 LIST requests).
    #[serde(default)]
    pub object_lists: u64,
    /// Object DELETEs (per object).
    #[serde(default)]
    pub object_deletes: u64,
    /// Function invocations (Lambda Invoke requests).
    #[serde(default)]
    pub invocations: u64,
    /// Bytes the object GETs returned.
    #[serde(default)]
    pub object_get_bytes: u64,
}

impl RequestCounts {
    /// Whether no request was counted.
    pub fn is_zero(&self) -> bool {
        *self == Self::default()
    }

    /// The count of one kind.
    pub fn get(&self, request: Request) -> u64 {
        self.as_array()[request as usize]
    }

    /// Adds `n` requests of one kind.
    pub fn add(&mut self, request: Request, n: u64) {
        let mut all = self.as_array();
        all[request as usize] += n;
        *self = Self::from_array(all);
    }

    fn as_array(&self) -> [u64; KINDS] {
        [
            self.store_reads,
            self.store_writes,
            self.object_gets,
            self.object_puts,
            self.object_lists,
            self.object_deletes,
            self.invocations,
            self.object_get_bytes,
        ]
    }

    fn from_array(a: [u64; KINDS]) -> Self {
        Self {
            store_reads: a[0],
            store_writes: a[1],
            object_gets: a[2],
            object_puts: a[3],
            object_lists: a[4],
            object_deletes: a[5],
            invocations: a[6],
            object_get_bytes: a[7],
        }
    }
}

impl Add for RequestCounts {
    type Output = Self;
    fn add(self, other: Self) -> Self {
        let (a, b) = (self.as_array(), other.as_array());
        Self::from_array(std::array::from_fn(|i| a[i] + b[i]))
    }
}

impl AddAssign for RequestCounts {
    fn add_assign(&mut self, other: Self) {
        *self = *self + other;
    }
}

impl std::iter::Sum for RequestCounts {
    fn sum<I: Iterator<Item = Self>>(iter: I) -> Self {
        iter.fold(Self::default(), Add::add)
    }
}

impl fmt::Display for RequestCounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "store reads {}, store writes {}, GETs {}, PUTs {}, LISTs {}, DELETEs {}, invocations {}",
            self.store_reads,
            self.store_writes,
            self.object_gets,
            self.object_puts,
            self.object_lists,
            self.object_deletes,
            self.invocations
        )
    }
}

/// Counters one task (or one submission) adds its requests to; shared by every store
/// wrapper it hands out.
#[derive(Debug, Default)]
pub struct Tally([AtomicU64; KINDS]);

impl Tally {
    /// A fresh, shareable tally.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Counts `n` requests of one kind.
    pub fn count(&self, request: Request, n: u64) {
        self.0[request as usize].fetch_add(n, Ordering::Relaxed);
    }

    /// The counts so far.
    pub fn counts(&self) -> RequestCounts {
        RequestCounts::from_array(std::array::from_fn(|i| self.0[i].load(Ordering::Relaxed)))
    }
}

/// Counts one [`JobStore`](crate::state::JobStore) call by its method name: reads and
/// writes as DynamoDB bills them (a task commit is two writes: the task item and its
/// commit counter; a new job one write per item it creates is counted by the caller).
pub fn count_store_call(tally: &Tally, op: &str) {
    match op {
        "get_job" | "job_state" | "load_job" | "get_stage" | "get_plan" | "task_view"
        | "get_task" | "list_tasks" | "list_task_range" | "list_counters" | "active_jobs"
        | "job_history" | "sweep_cursor" | "get_table" | "list_tables" => {
            tally.count(Request::StoreRead, 1)
        }
        "commit_task" => tally.count(Request::StoreWrite, 2),
        _ => tally.count(Request::StoreWrite, 1),
    }
}

/// Where a [`CountingStore`] reports each request.
pub type Sink = Arc<dyn Fn(Request, u64) + Send + Sync>;

/// A sink adding to `tally`.
pub fn sink(tally: Arc<Tally>) -> Sink {
    Arc::new(move |request, n| tally.count(request, n))
}

/// An object store that counts the requests it forwards. See the [module docs](self).
pub struct CountingStore {
    inner: Arc<dyn ObjectStore>,
    sink: Sink,
}

impl fmt::Debug for CountingStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CountingStore")
            .field("inner", &self.inner)
            .finish()
    }
}

impl fmt::Display for CountingStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Counting({})", self.inner)
    }
}

impl CountingStore {
    /// Wraps `inner`, reporting every request to `sink`.
    pub fn new(inner: Arc<dyn ObjectStore>, sink: Sink) -> Self {
        Self { inner, sink }
    }
}

#[async_trait]
impl ObjectStore for CountingStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        (self.sink)(Request::ObjectPut, 1);
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        (self.sink)(Request::ObjectPut, 1);
        let inner = self.inner.put_multipart_opts(location, opts).await?;
        Ok(Box::new(CountingUpload {
            inner,
            sink: self.sink.clone(),
        }))
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        (self.sink)(Request::ObjectGet, 1);
        let result = self.inner.get_opts(location, options).await?;
        (self.sink)(
            Request::ObjectGetBytes,
            result.range.end.saturating_sub(result.range.start),
        );
        Ok(result)
    }

    // `get_ranges` is left to the trait's default, which coalesces nearby ranges (as the
    // S3 store does) and reads each through `get_opts` above: one count per request.

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        let sink = self.sink.clone();
        self.inner.delete_stream(
            locations
                .map(move |l| {
                    sink(Request::ObjectDelete, 1);
                    l
                })
                .boxed(),
        )
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        (self.sink)(Request::ObjectList, 1);
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        (self.sink)(Request::ObjectList, 1);
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        (self.sink)(Request::ObjectPut, 1);
        self.inner.copy_opts(from, to, options).await
    }
}

/// A multipart upload that counts its parts and its completion.
struct CountingUpload {
    inner: Box<dyn MultipartUpload>,
    sink: Sink,
}

impl fmt::Debug for CountingUpload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CountingUpload")
            .field("inner", &self.inner)
            .finish()
    }
}

#[async_trait]
impl MultipartUpload for CountingUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        (self.sink)(Request::ObjectPut, 1);
        self.inner.put_part(data)
    }

    async fn complete(&mut self) -> object_store::Result<PutResult> {
        (self.sink)(Request::ObjectPut, 1);
        self.inner.complete().await
    }

    async fn abort(&mut self) -> object_store::Result<()> {
        self.inner.abort().await
    }
}

/// An object-store registry whose stores count their requests into one [`Sink`]: give a
/// task's runtime one, and every object request of the task — scans, shuffle reads and
/// writes — is counted.
pub struct CountingRegistry {
    inner: Arc<dyn ObjectStoreRegistry>,
    sink: Sink,
}

impl fmt::Debug for CountingRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CountingRegistry")
            .field("inner", &self.inner)
            .finish()
    }
}

impl CountingRegistry {
    /// `inner`'s stores, counting into `sink`.
    pub fn new(inner: Arc<dyn ObjectStoreRegistry>, sink: Sink) -> Self {
        Self { inner, sink }
    }
}

impl ObjectStoreRegistry for CountingRegistry {
    fn register_store(
        &self,
        url: &Url,
        store: Arc<dyn ObjectStore>,
    ) -> Option<Arc<dyn ObjectStore>> {
        self.inner.register_store(url, store)
    }

    fn deregister_store(&self, url: &Url) -> datafusion::error::Result<Arc<dyn ObjectStore>> {
        self.inner.deregister_store(url)
    }

    fn get_store(&self, url: &Url) -> datafusion::error::Result<Arc<dyn ObjectStore>> {
        let store = self.inner.get_store(url)?;
        Ok(Arc::new(CountingStore::new(store, self.sink.clone())))
    }
}

#[cfg(test)]
mod tests {
    use object_store::memory::InMemory;
    use object_store::{ObjectStoreExt, WriteMultipart};

    use super::*;

    /// Requests are counted as S3 bills them: nearby ranges coalesce into one GET, a
    /// multipart upload is a PUT to start, one per part and one to complete.
    #[tokio::test]
    async fn object_requests_are_counted_as_billed() {
        let tally = Tally::new();
        let store: Arc<dyn ObjectStore> = Arc::new(CountingStore::new(
            Arc::new(InMemory::new()),
            sink(tally.clone()),
        ));
        let path = Path::from("a/b");
        store.put(&path, vec![7u8; 4 << 20].into()).await.unwrap();
        store.get_range(&path, 0..10).await.unwrap();
        // Two ranges 10 bytes apart: one request; one far away: another.
        store
            .get_ranges(&path, &[0..100, 110..200, 3_000_000..3_000_010])
            .await
            .unwrap();
        let upload = store.put_multipart(&Path::from("a/c")).await.unwrap();
        let mut writer = WriteMultipart::new_with_chunk_size(upload, 5 << 20);
        writer.write(&vec![1u8; 11 << 20]);
        writer.finish().await.unwrap();
        let _ = store.list(Some(&Path::from("a"))).count().await;
        store.delete(&path).await.unwrap();
        let counts = tally.counts();
        assert_eq!(counts.object_gets, 3, "{counts}");
        assert_eq!(counts.object_get_bytes, 10 + 200 + 10, "{counts}");
        assert_eq!(counts.object_puts, 1 + 1 + 3 + 1, "{counts}");
        assert_eq!(counts.object_lists, 1);
        assert_eq!(counts.object_deletes, 1);
        assert_eq!(counts.store_reads + counts.invocations, 0);
    }

    #[test]
    fn store_calls_are_reads_or_writes_and_a_commit_is_two() {
        let tally = Tally::default();
        for op in [
            "load_job",
            "task_view",
            "list_tasks",
            "claim_stage",
            "commit_task",
        ] {
            count_store_call(&tally, op);
        }
        let counts = tally.counts();
        assert_eq!((counts.store_reads, counts.store_writes), (3, 3));
        let sum: RequestCounts = [counts, counts].into_iter().sum();
        assert_eq!(sum.store_writes, 6);
        assert_eq!(sum.get(Request::StoreRead), 6);
    }
}
