//! Request counters: how many DynamoDB, S3 and Lambda requests this process made. The
//! functions log the per-invocation difference, which is how "requests per task" is
//! measured on the local stack and read in CloudWatch on AWS.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use futures::stream::BoxStream;
use futures::StreamExt;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, Result,
};

/// One kind of request.
#[derive(Debug, Clone, Copy)]
pub enum Request {
    /// DynamoDB GetItem / Query.
    DynamoDbRead,
    /// DynamoDB UpdateItem / PutItem / DeleteItem / BatchWriteItem / TransactWriteItems.
    DynamoDbWrite,
    /// S3 GET (whole or ranged).
    S3Get,
    /// S3 PUT (or multipart part).
    S3Put,
    /// S3 LIST.
    S3List,
    /// S3 DELETE (per object).
    S3Delete,
    /// Lambda Invoke.
    LambdaInvoke,
}

const KINDS: usize = 7;
static COUNTS: [AtomicU64; KINDS] = [const { AtomicU64::new(0) }; KINDS];

/// Counts one request.
pub fn count(request: Request) {
    COUNTS[request as usize].fetch_add(1, Ordering::Relaxed);
}

/// A snapshot of the counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts([u64; KINDS]);

impl Counts {
    /// The counters now.
    pub fn now() -> Self {
        Self(std::array::from_fn(|i| COUNTS[i].load(Ordering::Relaxed)))
    }

    /// Requests made since `earlier`.
    pub fn since(self, earlier: Counts) -> Counts {
        Self(std::array::from_fn(|i| {
            self.0[i].saturating_sub(earlier.0[i])
        }))
    }

    /// Count of one kind.
    pub fn get(&self, request: Request) -> u64 {
        self.0[request as usize]
    }
}

impl fmt::Display for Counts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "dynamodb_reads={} dynamodb_writes={} s3_gets={} s3_puts={} s3_lists={} s3_deletes={} lambda_invokes={}",
            self.get(Request::DynamoDbRead),
            self.get(Request::DynamoDbWrite),
            self.get(Request::S3Get),
            self.get(Request::S3Put),
            self.get(Request::S3List),
            self.get(Request::S3Delete),
            self.get(Request::LambdaInvoke),
        )
    }
}

/// Where a [`CountingStore`] reports each request.
pub type Sink = Arc<dyn Fn(Request) + Send + Sync>;

/// An object store that counts the requests it forwards.
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

impl CountingStore {
    /// Wraps `inner`, counting into the process-wide counters.
    pub fn new(inner: Arc<dyn ObjectStore>) -> Self {
        Self::with_sink(inner, Arc::new(count))
    }

    /// Wraps `inner`, reporting every request to `sink`.
    pub fn with_sink(inner: Arc<dyn ObjectStore>, sink: Sink) -> Self {
        Self { inner, sink }
    }

    fn count(&self, request: Request) {
        (self.sink)(request)
    }
}

impl fmt::Display for CountingStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Counting({})", self.inner)
    }
}

#[async_trait]
impl ObjectStore for CountingStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        self.count(Request::S3Put);
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.count(Request::S3Put);
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        self.count(Request::S3Get);
        self.inner.get_opts(location, options).await
    }

    async fn get_ranges(
        &self,
        location: &Path,
        ranges: &[std::ops::Range<u64>],
    ) -> Result<Vec<bytes::Bytes>> {
        // The inner store coalesces nearby ranges; count what it is asked for.
        for _ in ranges {
            self.count(Request::S3Get);
        }
        self.inner.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        let sink = self.sink.clone();
        self.inner.delete_stream(
            locations
                .map(move |l| {
                    sink(Request::S3Delete);
                    l
                })
                .boxed(),
        )
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.count(Request::S3List);
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.count(Request::S3List);
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.count(Request::S3Put);
        self.inner.copy_opts(from, to, options).await
    }
}
