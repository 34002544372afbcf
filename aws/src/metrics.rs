//! Request counters: how many DynamoDB, S3 and Lambda requests this process made. The
//! functions log the per-invocation difference, which is how "requests per task" is
//! measured on the local stack and read in CloudWatch on AWS. (Each task and query also
//! counts its own, [`lambdafusion::requests`]; these count the process's.)

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub use lambdafusion::requests::CountingStore;

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

/// A [`lambdafusion::requests::Sink`] that counts object requests into this process's
/// counters: give it to a [`CountingStore`] in front of an S3 store.
pub fn process_sink() -> lambdafusion::requests::Sink {
    Arc::new(|request, n| {
        use lambdafusion::requests::Request as R;
        let kind = match request {
            R::ObjectGet => Request::S3Get,
            R::ObjectPut => Request::S3Put,
            R::ObjectList => Request::S3List,
            R::ObjectDelete => Request::S3Delete,
            R::StoreRead => Request::DynamoDbRead,
            R::StoreWrite => Request::DynamoDbWrite,
            R::Invocation => Request::LambdaInvoke,
            R::ObjectGetBytes => return,
        };
        for _ in 0..n {
            count(kind);
        }
    })
}
