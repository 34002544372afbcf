//! S3 through `object_store`: a DataFusion object store registry that creates an
//! `AmazonS3` store for any `s3://<bucket>` on first use, so table data in any bucket the
//! function may read and the shuffle bucket resolve the same way. A custom endpoint
//! (`AWS_ENDPOINT_URL_S3` or `AWS_ENDPOINT_URL`, e.g. the local stack) switches to
//! path-style requests and allows plain HTTP.

use std::sync::Arc;

use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::object_store::{DefaultObjectStoreRegistry, ObjectStoreRegistry};
use object_store::aws::AmazonS3Builder;
use object_store::signer::Signer;
use object_store::ObjectStore;
use url::Url;

/// S3 endpoint override from the environment, if any.
pub fn endpoint_from_env() -> Option<String> {
    ["AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"]
        .iter()
        .find_map(|k| std::env::var(k).ok().filter(|v| !v.is_empty()))
}

fn bucket_builder(bucket: &str) -> AmazonS3Builder {
    let mut builder = AmazonS3Builder::from_env().with_bucket_name(bucket);
    if let Some(endpoint) = endpoint_from_env() {
        builder = builder
            .with_endpoint(&endpoint)
            .with_allow_http(endpoint.starts_with("http://"))
            .with_virtual_hosted_style_request(false);
    }
    builder
}

/// Builds the store for one bucket from the environment (credentials, region, endpoint),
/// counting its requests (see [`crate::metrics`]).
pub fn bucket_store(bucket: &str) -> object_store::Result<Arc<dyn ObjectStore>> {
    let store: Arc<dyn ObjectStore> = Arc::new(bucket_builder(bucket).build()?);
    Ok(Arc::new(crate::metrics::CountingStore::new(store)))
}

/// Presigns URLs to objects of one bucket (large results are downloaded this way).
pub fn bucket_signer(bucket: &str) -> object_store::Result<Arc<dyn Signer>> {
    Ok(Arc::new(bucket_builder(bucket).build()?))
}

/// Object store registry that adds S3 buckets on demand. See the [module docs](self).
#[derive(Debug, Default)]
pub struct S3Registry {
    inner: DefaultObjectStoreRegistry,
}

impl ObjectStoreRegistry for S3Registry {
    fn register_store(
        &self,
        url: &Url,
        store: Arc<dyn ObjectStore>,
    ) -> Option<Arc<dyn ObjectStore>> {
        self.inner.register_store(url, store)
    }

    fn get_store(&self, url: &Url) -> DfResult<Arc<dyn ObjectStore>> {
        if let Ok(store) = self.inner.get_store(url) {
            return Ok(store);
        }
        if url.scheme() != "s3" {
            return self.inner.get_store(url);
        }
        let bucket = url.host_str().ok_or_else(|| {
            DataFusionError::Plan(format!("{url}: an s3:// location needs a bucket name"))
        })?;
        let store = bucket_store(bucket).map_err(|e| DataFusionError::ObjectStore(Box::new(e)))?;
        let base = Url::parse(&format!("s3://{bucket}"))
            .map_err(|e| DataFusionError::Plan(e.to_string()))?;
        self.inner.register_store(&base, store.clone());
        Ok(store)
    }

    fn deregister_store(&self, url: &Url) -> DfResult<Arc<dyn ObjectStore>> {
        self.inner.deregister_store(url)
    }
}
