//! [`HideMarkers`]: an object store whose listings leave out what Hive, Spark, Athena and
//! Trino treat as not part of a table — every path below the listed prefix with a part
//! that starts with `.` or with `_` (but not a `_col=value` partition directory) — so that
//! a table's directory may hold markers and metadata (`_SUCCESS`, the manifest of this
//! engine's writes, Spark's `_temporary/`, `.crc` files) beside its data files. Reads of
//! a named object are untouched.

use std::sync::Arc;

use async_trait::async_trait;
use futures::stream::BoxStream;
use futures::StreamExt;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult,
};

/// See the [module docs](self).
#[derive(Debug)]
pub struct HideMarkers {
    inner: Arc<dyn ObjectStore>,
}

impl HideMarkers {
    /// `inner` with its listings' hidden entries left out.
    pub fn new(inner: Arc<dyn ObjectStore>) -> Self {
        Self { inner }
    }
}

impl std::fmt::Display for HideMarkers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HideMarkers({})", self.inner)
    }
}

/// Whether one part of a path marks it hidden.
fn hidden_part(part: &str) -> bool {
    part.starts_with('.') || (part.starts_with('_') && !part.contains('='))
}

/// Whether `path`, listed under `prefix`, is hidden.
pub fn is_hidden(prefix: Option<&Path>, path: &Path) -> bool {
    let below = match prefix {
        Some(prefix) => match path.prefix_match(prefix) {
            Some(parts) => parts.map(|p| p.as_ref().to_string()).collect::<Vec<_>>(),
            None => return false,
        },
        None => path.parts().map(|p| p.as_ref().to_string()).collect(),
    };
    below.iter().any(|p| hidden_part(p))
}

#[async_trait]
impl ObjectStore for HideMarkers {
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

    async fn get_ranges(
        &self,
        location: &Path,
        ranges: &[std::ops::Range<u64>],
    ) -> object_store::Result<Vec<bytes::Bytes>> {
        self.inner.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        let under = prefix.cloned();
        self.inner
            .list(prefix)
            .filter(move |entry| {
                let keep = match entry {
                    Ok(meta) => !is_hidden(under.as_ref(), &meta.location),
                    Err(_) => true,
                };
                futures::future::ready(keep)
            })
            .boxed()
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        let under = prefix.cloned();
        self.inner
            .list_with_offset(prefix, offset)
            .filter(move |entry| {
                let keep = match entry {
                    Ok(meta) => !is_hidden(under.as_ref(), &meta.location),
                    Err(_) => true,
                };
                futures::future::ready(keep)
            })
            .boxed()
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        let mut listed = self.inner.list_with_delimiter(prefix).await?;
        listed.objects.retain(|o| !is_hidden(prefix, &o.location));
        listed.common_prefixes.retain(|p| !is_hidden(prefix, p));
        Ok(listed)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_and_dot_files_are_hidden_partition_directories_are_not() {
        let prefix = Path::from("data/_t");
        let hidden = |p: &str| is_hidden(Some(&prefix), &Path::from(p));
        assert!(hidden("data/_t/_SUCCESS"));
        assert!(hidden("data/_t/.part-0.parquet.crc"));
        assert!(hidden("data/_t/_temporary/0/part-0.parquet"));
        assert!(hidden("data/_t/year=2024/_SUCCESS"));
        assert!(!hidden("data/_t/part-0.parquet"));
        assert!(
            !hidden("data/_t/_year=2024/part-0.parquet"),
            "a partition directory"
        );
        assert!(!hidden("data/_t/year=2024/part-0.parquet"));
        assert!(
            !hidden("elsewhere/_x"),
            "not under the prefix: not this listing's"
        );
        assert!(is_hidden(None, &Path::from("a/_SUCCESS")));
    }

    #[tokio::test]
    async fn listings_leave_hidden_entries_out_and_reads_find_them() {
        use object_store::ObjectStoreExt;
        let inner = Arc::new(object_store::memory::InMemory::new());
        for p in ["t/a.parquet", "t/_SUCCESS", "t/k=1/b.parquet", "t/.x"] {
            inner
                .put(&Path::from(p), PutPayload::from("x"))
                .await
                .unwrap();
        }
        let store = HideMarkers::new(inner);
        let listed: Vec<String> = store
            .list(Some(&Path::from("t")))
            .map(|m| m.unwrap().location.to_string())
            .collect()
            .await;
        assert_eq!(listed.len(), 2, "{listed:?}");
        assert!(listed
            .iter()
            .all(|p| !p.contains("_SUCCESS") && !p.ends_with(".x")));
        let top = store
            .list_with_delimiter(Some(&Path::from("t")))
            .await
            .unwrap();
        assert_eq!(top.objects.len(), 1);
        assert_eq!(top.common_prefixes.len(), 1);
        assert!(store.get(&Path::from("t/_SUCCESS")).await.is_ok());
    }
}
