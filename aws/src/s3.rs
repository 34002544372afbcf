//! S3 through `object_store`: a DataFusion object store registry that creates an
//! `AmazonS3` store for the buckets a deployment may use (its data buckets and its shuffle
//! bucket) on first use, and nothing else: no other bucket and no other scheme — in
//! particular no `file://`, so no SQL can reach a function's local file system. A custom
//! endpoint (`AWS_ENDPOINT_URL_S3` or `AWS_ENDPOINT_URL`, e.g. the local stack) switches
//! to path-style requests and allows plain HTTP. A bucket in another region is read there
//! ([`crate::region`]).

use std::sync::Arc;

use datafusion::error::{DataFusionError, Result as DfResult};
use std::collections::HashMap;
use std::sync::RwLock;

use datafusion::execution::object_store::ObjectStoreRegistry;
use object_store::aws::AmazonS3Builder;
use object_store::client::SpawnedReqwestConnector;
use object_store::signer::Signer;
use object_store::ObjectStore;
use url::Url;

/// S3 endpoint override from the environment, if any.
pub fn endpoint_from_env() -> Option<String> {
    ["AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"]
        .iter()
        .find_map(|k| std::env::var(k).ok().filter(|v| !v.is_empty()))
}

fn bucket_builder(bucket: &str, region: Option<&str>) -> AmazonS3Builder {
    let mut builder = AmazonS3Builder::from_env().with_bucket_name(bucket);

    if let Some(region) = region {
        builder = builder.with_region(region);
    }
    if let Some(endpoint) = endpoint_from_env() {
        builder = builder
            .with_endpoint(&endpoint)
            .with_allow_http(endpoint.starts_with("http://"))
            .with_virtual_hosted_style_request(false);
    }
    builder
}

/// Builds the store for one bucket from the environment (credentials, endpoint, and the
/// region unless `region` names the bucket's own), counting its requests (see
/// [`crate::metrics`]).
pub fn bucket_store(
    bucket: &str,
    region: Option<&str>,
) -> object_store::Result<Arc<dyn ObjectStore>> {
    io_bucket_store(bucket, region, None)
}

/// [`bucket_store`] whose requests run on `io` (when given), whichever runtime makes them.
fn io_bucket_store(
    bucket: &str,
    region: Option<&str>,
    io: Option<&tokio::runtime::Handle>,
) -> object_store::Result<Arc<dyn ObjectStore>> {
    let mut builder = bucket_builder(bucket, region);
    if let Some(io) = io {
        builder = builder.with_http_connector(SpawnedReqwestConnector::new(io.clone()));
    }
    let store: Arc<dyn ObjectStore> = Arc::new(builder.build()?);
    Ok(Arc::new(crate::metrics::CountingStore::new(
        store,
        crate::metrics::process_sink(),
    )))
}

/// Presigns URLs to objects of one bucket (large results are downloaded this way).
pub fn bucket_signer(bucket: &str) -> object_store::Result<Arc<dyn Signer>> {
    Ok(Arc::new(bucket_builder(bucket, None).build()?))
}

/// Object store registry that adds the allowed S3 buckets on demand. See the
/// [module docs](self).
#[derive(Debug)]
pub struct S3Registry {
    buckets: Vec<String>,
    stores: RwLock<HashMap<String, Arc<dyn ObjectStore>>>,
    /// The runtime its stores' requests run on: the one it was made on. A task's plan
    /// runs on a runtime of its own that ends with the task
    /// (`lambdafusion::executor::threads`); connections pooled by its stores must
    /// outlive it.
    io: Option<tokio::runtime::Handle>,
}

impl S3Registry {
    /// A registry serving exactly `buckets`, its requests run on the current runtime.
    pub fn new(buckets: Vec<String>) -> Self {
        Self {
            buckets,
            stores: RwLock::new(HashMap::new()),
            io: tokio::runtime::Handle::try_current().ok(),
        }
    }

    fn refuse(&self, url: &Url) -> DataFusionError {
        DataFusionError::Plan(format!(
            "{url} is not readable here: only the S3 buckets of this deployment are ({}); \
             add a data bucket with LAMBDAFUSION_DATA_BUCKETS",
            self.buckets.join(", ")
        ))
    }
}

impl ObjectStoreRegistry for S3Registry {
    fn register_store(
        &self,
        url: &Url,
        store: Arc<dyn ObjectStore>,
    ) -> Option<Arc<dyn ObjectStore>> {
        let bucket = url.host_str()?.to_string();
        if url.scheme() != "s3" || !self.buckets.contains(&bucket) {
            return None;
        }
        self.stores
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(bucket, store)
    }

    fn get_store(&self, url: &Url) -> DfResult<Arc<dyn ObjectStore>> {
        let bucket = match (url.scheme(), url.host_str()) {
            ("s3", Some(bucket)) if self.buckets.iter().any(|b| b == bucket) => bucket,
            _ => return Err(self.refuse(url)),
        };
        if let Some(store) = self
            .stores
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(bucket)
        {
            return Ok(store.clone());
        }
        // In the environment's region, following the bucket to its own when S3 says it is
        // elsewhere (crate::region).
        let io = self.io.clone();
        // Listings leave out markers (`_SUCCESS`) and hidden files, as Athena's do.
        let store: Arc<dyn ObjectStore> =
            Arc::new(lambdafusion::hidden::HideMarkers::new(Arc::new(
                crate::region::RegionFollowing::new(
                    bucket,
                    Arc::new(move |bucket: &str, region: Option<&str>| {
                        io_bucket_store(bucket, region, io.as_ref())
                    }),
                    crate::region::s3_lookup(),
                )
                .map_err(|e| DataFusionError::ObjectStore(Box::new(e)))?,
            )));
        self.stores
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(bucket.to_string(), store.clone());
        Ok(store)
    }

    fn deregister_store(&self, url: &Url) -> DfResult<Arc<dyn ObjectStore>> {
        let bucket = url.host_str().unwrap_or_default();
        self.stores
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(bucket)
            .ok_or_else(|| self.refuse(url))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_deployments_buckets_resolve() {
        let registry = S3Registry::new(vec!["lake".into(), "shuffle".into()]);
        let url = |u: &str| Url::parse(u).unwrap();
        assert!(registry.get_store(&url("s3://lake/t/")).is_ok());
        assert!(registry.get_store(&url("s3://shuffle/p/")).is_ok());
        for refused in [
            "s3://other/t/",
            "file:///etc/hostname",
            "file:///proc/self/environ",
            "http://169.254.169.254/latest/",
        ] {
            let e = registry.get_store(&url(refused)).unwrap_err();
            assert!(
                e.to_string().contains("LAMBDAFUSION_DATA_BUCKETS"),
                "{refused}: {e}"
            );
        }
        let local: Arc<dyn ObjectStore> = Arc::new(object_store::local::LocalFileSystem::new());
        assert!(registry.register_store(&url("file:///"), local).is_none());
        assert!(registry.get_store(&url("file:///etc/hostname")).is_err());
    }
}
