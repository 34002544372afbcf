//! Data buckets in another region than the deployment: S3 answers a request sent to the
//! wrong region with a bare 301 (`object_store`: "this normally indicates an incorrectly
//! configured region"). A data bucket's store is a [`RegionFollowing`] store: on that
//! answer it looks up the bucket's region once (`x-amz-bucket-region`, through
//! `object_store`'s `resolve_bucket_region`), rebuilds the store for it and sends the
//! request again; later requests go there directly. A bucket in the deployment's region
//! costs nothing extra (no lookup at start-up).

use std::fmt;
use std::sync::{Arc, RwLock};

use async_trait::async_trait;
use futures::future::BoxFuture;
use futures::stream::{self, BoxStream, StreamExt};
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult,
};

/// Finds a bucket's region.
pub type Lookup =
    Arc<dyn Fn(String) -> BoxFuture<'static, object_store::Result<String>> + Send + Sync>;

/// Builds a bucket's store for a region (`None`: the environment's).
pub type Build =
    Arc<dyn Fn(&str, Option<&str>) -> object_store::Result<Arc<dyn ObjectStore>> + Send + Sync>;

/// S3's lookup: `object_store::aws::resolve_bucket_region`.
pub fn s3_lookup() -> Lookup {
    Arc::new(|bucket: String| {
        Box::pin(async move {
            object_store::aws::resolve_bucket_region(&bucket, &object_store::ClientOptions::new())
                .await
        })
    })
}

/// Whether `error` is S3's answer to a request sent to the wrong region.
pub fn is_wrong_region(error: &object_store::Error) -> bool {
    error.to_string().contains("incorrectly configured region")
}

struct Shared {
    bucket: String,
    current: RwLock<Arc<dyn ObjectStore>>,
    build: Build,
    lookup: Lookup,
}

/// A bucket's store that follows the bucket to its region. See the [module docs](self).
#[derive(Clone)]
pub struct RegionFollowing(Arc<Shared>);

impl fmt::Debug for RegionFollowing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RegionFollowing({})", self.0.bucket)
    }
}

impl fmt::Display for RegionFollowing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RegionFollowing({})", self.0.bucket)
    }
}

impl RegionFollowing {
    /// `bucket`'s store in the environment's region, built by `build`, following it to the
    /// region `lookup` finds when S3 says it is elsewhere.
    pub fn new(bucket: &str, build: Build, lookup: Lookup) -> object_store::Result<Self> {
        let first = build(bucket, None)?;
        Ok(Self(Arc::new(Shared {
            bucket: bucket.to_string(),
            current: RwLock::new(first),
            build,
            lookup,
        })))
    }

    fn current(&self) -> Arc<dyn ObjectStore> {
        self.0
            .current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// After `error`: the store in the bucket's own region when `error` says the request
    /// went to the wrong one, else `Err(error)`.
    async fn follow(
        &self,
        error: object_store::Error,
    ) -> object_store::Result<Arc<dyn ObjectStore>> {
        if !is_wrong_region(&error) {
            return Err(error);
        }
        let region = (self.0.lookup)(self.0.bucket.clone()).await?;
        tracing::info!(bucket = %self.0.bucket, %region, "data bucket is in another region; reading it there");
        let store = (self.0.build)(&self.0.bucket, Some(&region))?;
        *self.0.current.write().unwrap_or_else(|p| p.into_inner()) = store.clone();
        Ok(store)
    }
}

/// Runs `$call` on the current store, and once more on the bucket's own region's when the
/// first answer says it is elsewhere.
macro_rules! followed {
    ($self:ident, |$store:ident| $call:expr) => {{
        let $store = $self.current();
        match $call {
            Err(e) => {
                let $store = $self.follow(e).await?;
                $call
            }
            ok => ok,
        }
    }};
}

#[async_trait]
impl ObjectStore for RegionFollowing {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        followed!(self, |store| store
            .put_opts(location, payload.clone(), opts.clone())
            .await)
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        followed!(self, |store| store
            .put_multipart_opts(location, opts.clone())
            .await)
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        followed!(self, |store| store
            .get_opts(location, options.clone())
            .await)
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        // Deletes go to the current store unfollowed: the engine deletes only from its own
        // shuffle bucket, which is in the deployment's region (data buckets are read-only).
        self.current().delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        let this = self.clone();
        let prefix = prefix.cloned();
        stream::once(async move {
            let mut first = this.current().list(prefix.as_ref());
            match first.next().await {
                Some(Err(e)) => match this.follow(e).await {
                    Ok(store) => store.list(prefix.as_ref()),
                    Err(e) => stream::once(async { Err(e) }).boxed(),
                },
                Some(item) => stream::once(async { item }).chain(first).boxed(),
                None => stream::empty().boxed(),
            }
        })
        .flatten()
        .boxed()
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        followed!(self, |store| store.list_with_delimiter(prefix).await)
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        followed!(self, |store| store
            .copy_opts(from, to, options.clone())
            .await)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use object_store::memory::InMemory;
    use object_store::ObjectStoreExt;

    use super::*;

    /// A store for the wrong region: every request fails as S3's bare 301 does.
    #[derive(Debug)]
    struct WrongRegion;

    impl fmt::Display for WrongRegion {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "WrongRegion")
        }
    }

    fn redirect() -> object_store::Error {
        object_store::Error::Generic {
            store: "S3",
            source: "Received redirect without LOCATION, this normally indicates an \
                     incorrectly configured region"
                .into(),
        }
    }

    #[async_trait]
    impl ObjectStore for WrongRegion {
        async fn put_opts(
            &self,
            _: &Path,
            _: PutPayload,
            _: PutOptions,
        ) -> object_store::Result<PutResult> {
            Err(redirect())
        }
        async fn put_multipart_opts(
            &self,
            _: &Path,
            _: PutMultipartOptions,
        ) -> object_store::Result<Box<dyn MultipartUpload>> {
            Err(redirect())
        }
        async fn get_opts(&self, _: &Path, _: GetOptions) -> object_store::Result<GetResult> {
            Err(redirect())
        }
        fn delete_stream(
            &self,
            _: BoxStream<'static, object_store::Result<Path>>,
        ) -> BoxStream<'static, object_store::Result<Path>> {
            stream::once(async { Err(redirect()) }).boxed()
        }
        fn list(&self, _: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
            stream::once(async { Err(redirect()) }).boxed()
        }
        async fn list_with_delimiter(&self, _: Option<&Path>) -> object_store::Result<ListResult> {
            Err(redirect())
        }
        async fn copy_opts(&self, _: &Path, _: &Path, _: CopyOptions) -> object_store::Result<()> {
            Err(redirect())
        }
    }

    /// A bucket "in eu-west-1": its store answers only when built for that region; the
    /// lookup is counted.
    fn bucket_elsewhere() -> (RegionFollowing, Arc<AtomicUsize>, Arc<InMemory>) {
        let data = Arc::new(InMemory::new());
        let lookups = Arc::new(AtomicUsize::new(0));
        let there = data.clone();
        let build: Build = Arc::new(move |_bucket, region| {
            Ok(match region {
                Some("eu-west-1") => there.clone() as Arc<dyn ObjectStore>,
                _ => Arc::new(WrongRegion),
            })
        });
        let counted = lookups.clone();
        let lookup: Lookup = Arc::new(move |bucket| {
            counted.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move {
                assert_eq!(bucket, "lake-eu");
                Ok("eu-west-1".to_string())
            })
        });
        (
            RegionFollowing::new("lake-eu", build, lookup).unwrap(),
            lookups,
            data,
        )
    }

    #[tokio::test]
    async fn a_bucket_in_another_region_is_read_there_after_one_lookup() {
        let (store, lookups, data) = bucket_elsewhere();
        data.put(&Path::from("t/a.parquet"), PutPayload::from_static(b"rows"))
            .await
            .unwrap();
        // Planning lists first: the redirect is followed inside the stream.
        let listed: Vec<_> = store.list(Some(&Path::from("t"))).collect().await;
        assert_eq!(listed.len(), 1, "{listed:?}");
        assert_eq!(
            listed[0].as_ref().unwrap().location,
            Path::from("t/a.parquet")
        );
        let bytes = store
            .get(&Path::from("t/a.parquet"))
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        assert_eq!(&bytes[..], b"rows");
        assert_eq!(
            lookups.load(Ordering::SeqCst),
            1,
            "looked up once, then remembered"
        );
    }

    #[tokio::test]
    async fn other_errors_are_not_followed() {
        let (store, lookups, _) = bucket_elsewhere();
        // Followed to eu-west-1, where the object does not exist: NotFound, not a loop.
        let missing = store.get(&Path::from("nope")).await.unwrap_err();
        assert!(
            matches!(missing, object_store::Error::NotFound { .. }),
            "{missing}"
        );
        let again = store.get(&Path::from("nope")).await.unwrap_err();
        assert!(
            matches!(again, object_store::Error::NotFound { .. }),
            "{again}"
        );
        assert_eq!(lookups.load(Ordering::SeqCst), 1);
        assert!(!is_wrong_region(&missing));
        assert!(is_wrong_region(&redirect()));
    }

    #[tokio::test]
    async fn a_failed_lookup_is_the_error() {
        let build: Build = Arc::new(|_, _| Ok(Arc::new(WrongRegion) as Arc<dyn ObjectStore>));
        let lookup: Lookup = Arc::new(|bucket| {
            Box::pin(async move {
                Err(object_store::Error::Generic {
                    store: "S3",
                    source: format!("bucket {bucket} does not exist").into(),
                })
            })
        });
        let store = RegionFollowing::new("gone", build, lookup).unwrap();
        let error = store.get(&Path::from("x")).await.unwrap_err();
        assert!(
            error.to_string().contains("bucket gone does not exist"),
            "{error}"
        );
    }
}
