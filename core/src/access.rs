//! Who may read what: where tables may live ([`AccessPolicy::check_location`]), which jobs
//! a caller may see ([`AccessPolicy::can_read`]), who may change the catalog, and how
//! long a presigned download may live — and, embedded, a file system that cannot be
//! talked out of its allowed directories ([`ConfinedFileSystem`]).
//!
//! On AWS the policy comes from the deployment (`LAMBDAFUSION_DATA_BUCKETS`,
//! `LAMBDAFUSION_ADMIN_PRINCIPALS`, `LAMBDAFUSION_CATALOG_WRITERS`,
//! `LAMBDAFUSION_MAX_PRESIGN_SECS`); embedded from `--allow-path`. A location is refused
//! unless it lies inside an allowed one, and never inside the engine's own shuffle,
//! result and state locations.

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::stream::BoxStream;
use futures::StreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult,
};

use crate::{Error, Result};

/// The identity of an API caller: an IAM principal ARN, a JWT subject, or [`Caller::LOCAL`]
/// for the embedded engine. Jobs are owned by the caller that submitted them.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Caller(pub String);

impl Caller {
    /// The identity of every caller of the embedded engine.
    pub const LOCAL: &'static str = "local";

    /// The embedded engine's one caller.
    pub fn local() -> Self {
        Caller(Self::LOCAL.to_string())
    }

    /// The caller's principal.
    pub fn principal(&self) -> &str {
        &self.0
    }
}

impl Default for Caller {
    fn default() -> Self {
        Self::local()
    }
}

/// Where tables may live and who may see what. See the [module docs](self).
#[derive(Debug, Clone)]
pub struct AccessPolicy {
    /// Locations tables may be created on: `s3://bucket`, `s3://bucket/prefix`, or
    /// absolute directories (`/data`, `file:///data`). Empty: no location at all.
    pub data_locations: Vec<String>,
    /// Locations never readable as tables: the engine's own shuffle, result and state
    /// locations (even inside an allowed one).
    pub reserved_locations: Vec<String>,
    /// The setting that adds data locations, named in refusals.
    pub location_setting: String,
    /// Locations `COPY ... TO` and `CREATE TABLE ... AS` may write to (and, so, read):
    /// empty by default, so nothing is written anywhere until a deployment says where.
    pub write_locations: Vec<String>,
    /// The setting that adds write locations, named in refusals.
    pub write_setting: String,
    /// Principals that may read and cancel every caller's jobs.
    pub admins: Vec<String>,
    /// Principals that may create and drop tables; `None`: every caller.
    pub catalog_writers: Option<Vec<String>>,
    /// Longest lifetime of a presigned download URL.
    pub max_presign: Duration,
}

impl Default for AccessPolicy {
    fn default() -> Self {
        Self {
            data_locations: Vec::new(),
            reserved_locations: Vec::new(),
            location_setting: "--allow-path DIR (or LAMBDAFUSION_ALLOW_PATHS)".into(),
            write_locations: Vec::new(),
            write_setting: "--allow-write DIR (or LAMBDAFUSION_ALLOW_WRITE)".into(),
            admins: Vec::new(),
            catalog_writers: None,
            max_presign: Duration::from_secs(15 * 60),
        }
    }
}

/// A location taken apart for matching.
#[derive(Debug, PartialEq, Eq)]
enum Place {
    /// `s3://bucket/key...`: the bucket and the key's segments.
    S3 {
        bucket: String,
        segments: Vec<String>,
    },
    /// A local path, fully resolved.
    File(PathBuf),
}

impl Place {
    fn contains(&self, other: &Place) -> bool {
        match (self, other) {
            (
                Place::S3 { bucket, segments },
                Place::S3 {
                    bucket: b,
                    segments: s,
                },
            ) => bucket == b && s.starts_with(segments),
            (Place::File(dir), Place::File(path)) => path.starts_with(dir),
            _ => false,
        }
    }
}

/// The part of a location before its first glob character, cut back to a whole segment.
fn without_glob(location: &str) -> &str {
    match location.find(['*', '?', '[']) {
        Some(i) => &location[..location[..i].rfind('/').map_or(0, |j| j + 1)],
        None => location,
    }
}

/// Resolves a local path: `..` and symlinks of the part that exists, and the rest
/// appended (a path that does not exist yet cannot escape through a symlink).
fn resolve_path(path: &Path) -> Result<PathBuf> {
    if !path.is_absolute() {
        return Err(Error::InvalidInput(format!(
            "{} is not an absolute path",
            path.display()
        )));
    }
    if path.components().any(|c| c == Component::ParentDir) {
        // canonicalize below resolves `..` only through existing directories.
        if let Ok(p) = std::fs::canonicalize(path) {
            return Ok(p);
        }
        return Err(Error::InvalidInput(format!(
            "{} contains `..` and does not exist",
            path.display()
        )));
    }
    let mut existing = path.to_path_buf();
    let mut rest = Vec::new();
    loop {
        match std::fs::canonicalize(&existing) {
            Ok(resolved) => {
                return Ok(rest.iter().rev().fold(resolved, |p, c| p.join(c)));
            }
            Err(_) => match (existing.file_name(), existing.parent()) {
                (Some(name), Some(parent)) => {
                    rest.push(name.to_os_string());
                    existing = parent.to_path_buf();
                }
                _ => return Ok(path.to_path_buf()),
            },
        }
    }
}

fn place(location: &str) -> Result<Place> {
    let location = without_glob(location.trim());
    if location.starts_with("s3://") {
        // Exactly as the object store will resolve it: the URL's path, percent-decoded
        // once, cut into segments (`%2F` is a separator there, `%252F` is not).
        let invalid = |why: String| Error::InvalidInput(format!("{location}: {why}"));
        let url = url::Url::parse(location).map_err(|e| invalid(e.to_string()))?;
        let bucket = url.host_str().unwrap_or_default().to_string();
        if bucket.is_empty() {
            return Err(invalid("an s3:// location needs a bucket name".into()));
        }
        let key = ObjectPath::from_url_path(url.path())
            .map_err(|e| invalid(format!("not a valid object key ({e})")))?;
        let segments: Vec<String> = key.parts().map(|p| p.as_ref().to_string()).collect();
        if segments.iter().any(|s| s == "." || s == "..") {
            return Err(invalid(
                "`.` and `..` are not allowed in an S3 location".into(),
            ));
        }
        return Ok(Place::S3 { bucket, segments });
    }
    let path = if location.starts_with("file://") {
        url::Url::parse(location)
            .ok()
            .and_then(|u| u.to_file_path().ok())
            .ok_or_else(|| Error::InvalidInput(format!("{location} is not a valid file URL")))?
    } else if location.contains("://") {
        return Err(Error::InvalidInput(format!(
            "{location}: only s3:// and local locations are supported"
        )));
    } else {
        PathBuf::from(location)
    };
    Ok(Place::File(resolve_path(&path)?))
}

impl AccessPolicy {
    /// Checks that a table may live at `location` (a URL as DataFusion resolved it, or a
    /// path): inside an allowed location and outside every reserved one, after resolving
    /// `..` and symlinks. The refusal is a 400 naming the setting that would allow it.
    pub fn check_location(&self, location: &str) -> Result<()> {
        let target = self.outside_reserved(location, "readable as a table")?;
        let allowed = self
            .data_locations
            .iter()
            .chain(&self.write_locations)
            .filter_map(|l| place(l).ok())
            .any(|l| l.contains(&target));
        if allowed {
            return Ok(());
        }
        let listed = if self.data_locations.is_empty() {
            "none are configured".to_string()
        } else {
            format!("allowed: {}", self.data_locations.join(", "))
        };
        Err(Error::InvalidInput(format!(
            "{location} is outside the locations tables may be read from ({listed}); \
             add it with {}",
            self.location_setting
        )))
    }

    /// Checks that `COPY` or `CREATE TABLE ... AS` may write at `location`: inside a write
    /// location and outside every reserved one, after resolving `..` and symlinks. The
    /// refusal is a 400 naming the setting that would allow it.
    pub fn check_write_location(&self, location: &str) -> Result<()> {
        let target = self.outside_reserved(location, "written by a statement")?;
        if self
            .write_locations
            .iter()
            .filter_map(|l| place(l).ok())
            .any(|l| l.contains(&target))
        {
            return Ok(());
        }
        let listed = if self.write_locations.is_empty() {
            "none are configured: this engine writes no table data until told where".to_string()
        } else {
            format!("allowed: {}", self.write_locations.join(", "))
        };
        Err(Error::InvalidInput(format!(
            "{location} is outside the locations statements may write to ({listed}); add it \
             with {}",
            self.write_setting
        )))
    }

    /// `location` taken apart, unless it is, or contains, a reserved location.
    fn outside_reserved(&self, location: &str, what: &str) -> Result<Place> {
        let target = place(location)?;
        for reserved in &self.reserved_locations {
            if place(reserved).is_ok_and(|r| r.contains(&target) || target.contains(&r)) {
                return Err(Error::InvalidInput(format!(
                    "{location} is, or contains, this engine's own shuffle, result or state \
                     location ({reserved}), which is never {what}"
                )));
            }
        }
        Ok(target)
    }

    /// Whether `caller` may see and cancel a job owned by `owner`.
    pub fn can_read(&self, caller: &Caller, owner: &str) -> bool {
        caller.0 == owner || self.admins.iter().any(|a| listed(a, &caller.0))
    }

    /// Refuses a catalog change by a caller not in `catalog_writers` (when it is set).
    pub fn check_catalog_writer(&self, caller: &Caller) -> Result<()> {
        match &self.catalog_writers {
            Some(writers) if !writers.iter().any(|w| listed(w, &caller.0)) => {
                Err(Error::Forbidden(format!(
                    "{} may not create or drop tables: only the principals in \
                     LAMBDAFUSION_CATALOG_WRITERS (Terraform: catalog_writers) may",
                    caller.0
                )))
            }
            _ => Ok(()),
        }
    }

    /// The lifetime of a presigned URL: what was asked (default 15 min), at most
    /// [`AccessPolicy::max_presign`].
    pub fn presign_lifetime(&self, asked_secs: Option<u64>) -> Duration {
        let asked = Duration::from_secs(asked_secs.unwrap_or(900).max(1));
        asked.min(self.max_presign)
    }

    /// The local directories of [`AccessPolicy::data_locations`], resolved.
    pub fn local_roots(&self) -> Vec<PathBuf> {
        local_dirs(&self.data_locations)
    }

    /// The local directories of [`AccessPolicy::write_locations`], resolved.
    pub fn local_write_roots(&self) -> Vec<PathBuf> {
        local_dirs(&self.write_locations)
    }
}

/// The local directories among `locations`, resolved.
fn local_dirs(locations: &[String]) -> Vec<PathBuf> {
    locations
        .iter()
        .filter_map(|l| match place(l) {
            Ok(Place::File(p)) => Some(p),
            _ => None,
        })
        .collect()
}

/// Whether an entry of an admin or writer list names `principal`. An assumed-role
/// caller (`arn:aws:sts::<account>:assumed-role/<role>/<session>`) chose its session name
/// itself, so anyone who may assume the role may choose any: an entry naming the role —
/// `arn:aws:iam::<account>:role/[<path>/]<role>` or the session-less
/// `arn:aws:sts::<account>:assumed-role/<role>` — matches every session of it, and a
/// full session ARN matches that session alone (only as strong as the role's trust
/// policy's hold on session names, `sts:RoleSessionName`). Everything else matches
/// exactly.
pub fn listed(entry: &str, principal: &str) -> bool {
    if entry == principal {
        return true;
    }
    let Some((prefix, role_session)) = principal.split_once(":assumed-role/") else {
        return false;
    };
    let Some(account) = prefix.strip_prefix("arn:aws:sts::").or_else(|| {
        // Other partitions: arn:aws-cn:sts::, arn:aws-us-gov:sts::.
        prefix.split_once(":sts::").map(|(_, account)| account)
    }) else {
        return false;
    };
    let partition = prefix.split(':').nth(1).unwrap_or("aws");
    let Some((role, _session)) = role_session.split_once('/') else {
        return false;
    };
    if entry == format!("arn:{partition}:sts::{account}:assumed-role/{role}") {
        return true;
    }
    // An IAM role ARN, whatever its path: the assumed-role ARN carries the name alone.
    entry
        .strip_prefix(&format!("arn:{partition}:iam::{account}:role/"))
        .is_some_and(|path_and_name| path_and_name.rsplit('/').next() == Some(role))
}

/// A local file system confined to some directories: every read and listing of a path
/// that resolves (symlinks included) outside its readable roots, and every write or
/// delete outside its writable roots, is refused with `PermissionDenied`. The embedded
/// engine's `file://` store: tables' directories are readable only, and the engine
/// writes nowhere but its own shuffle directory, so that no location the SQL layer lets
/// through — a symlink inside an allowed directory, a table created before the policy
/// changed, a plan that somehow writes — can reach the rest of the machine.
#[derive(Debug)]
pub struct ConfinedFileSystem {
    inner: Arc<dyn ObjectStore>,
    /// Where reads may go: the readable and the writable roots.
    readable: Vec<PathBuf>,
    /// Where writes and deletes may go.
    writable: Vec<PathBuf>,
}

impl std::fmt::Display for ConfinedFileSystem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ConfinedFileSystem({} readable, {} writable roots)",
            self.readable.len(),
            self.writable.len()
        )
    }
}

impl ConfinedFileSystem {
    /// `inner` (a local file system store) that reads only inside `readable` or
    /// `writable`, and writes only inside `writable`.
    pub fn new(
        inner: Arc<dyn ObjectStore>,
        readable: Vec<PathBuf>,
        writable: Vec<PathBuf>,
    ) -> Self {
        let resolve = |roots: Vec<PathBuf>| -> Vec<PathBuf> {
            roots
                .into_iter()
                .map(|r| resolve_path(&r).unwrap_or(r))
                .collect()
        };
        let writable = resolve(writable);
        let mut readable = resolve(readable);
        readable.extend(writable.iter().cloned());
        Self {
            inner,
            readable,
            writable,
        }
    }

    fn check(&self, location: &ObjectPath) -> object_store::Result<()> {
        check_confined(&self.readable, location, Access::Read)
    }

    fn check_write(&self, location: &ObjectPath) -> object_store::Result<()> {
        check_confined(&self.writable, location, Access::Write)
    }
}

/// What a [`ConfinedFileSystem`] is asked to do with a path.
#[derive(Debug, Clone, Copy)]
enum Access {
    Read,
    Write,
}

/// `Ok` when `location` resolves inside one of `roots`.
fn check_confined(
    roots: &[PathBuf],
    location: &ObjectPath,
    access: Access,
) -> object_store::Result<()> {
    let path = PathBuf::from(format!("/{location}"));
    let resolved = resolve_path(&path).unwrap_or(path);
    if roots.iter().any(|r| resolved.starts_with(r)) {
        return Ok(());
    }
    let rule = match access {
        Access::Read => "outside the directories this engine may read (--allow-path)",
        Access::Write => {
            "outside the engine's own shuffle directory and the write locations \
             (--allow-write), the only places it writes: table directories are read-only"
        }
    };
    Err(object_store::Error::PermissionDenied {
        path: location.to_string(),
        source: format!("{} is {rule}", resolved.display()).into(),
    })
}

#[async_trait]
impl ObjectStore for ConfinedFileSystem {
    async fn put_opts(
        &self,
        location: &ObjectPath,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.check_write(location)?;
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &ObjectPath,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.check_write(location)?;
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &ObjectPath,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.check(location)?;
        self.inner.get_opts(location, options).await
    }

    async fn get_ranges(
        &self,
        location: &ObjectPath,
        ranges: &[std::ops::Range<u64>],
    ) -> object_store::Result<Vec<bytes::Bytes>> {
        self.check(location)?;
        self.inner.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<ObjectPath>>,
    ) -> BoxStream<'static, object_store::Result<ObjectPath>> {
        let roots = self.writable.clone();
        let checked = locations
            .map(move |l| {
                let l = l?;
                check_confined(&roots, &l, Access::Write).map(|()| l)
            })
            .boxed();
        self.inner.delete_stream(checked)
    }

    fn list(
        &self,
        prefix: Option<&ObjectPath>,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        let root = ObjectPath::from("");
        if let Err(e) = self.check(prefix.unwrap_or(&root)) {
            return futures::stream::once(async move { Err(e) }).boxed();
        }
        let roots = self.readable.clone();
        self.inner
            .list(prefix)
            .filter(move |entry| {
                // Files reached through a symlink out of the roots are left out.
                let keep = match entry {
                    Ok(meta) => {
                        let path = PathBuf::from(format!("/{}", meta.location));
                        let resolved = resolve_path(&path).unwrap_or(path);
                        roots.iter().any(|r| resolved.starts_with(r))
                    }
                    Err(_) => true,
                };
                futures::future::ready(keep)
            })
            .boxed()
    }

    async fn list_with_delimiter(
        &self,
        prefix: Option<&ObjectPath>,
    ) -> object_store::Result<ListResult> {
        self.check(prefix.unwrap_or(&ObjectPath::from("")))?;
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &ObjectPath,
        to: &ObjectPath,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.check(from)?;
        self.check_write(to)?;
        self.inner.copy_opts(from, to, options).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(locations: &[&str], reserved: &[&str]) -> AccessPolicy {
        AccessPolicy {
            data_locations: locations.iter().map(|s| s.to_string()).collect(),
            reserved_locations: reserved.iter().map(|s| s.to_string()).collect(),
            location_setting: "--allow-path".into(),
            ..AccessPolicy::default()
        }
    }

    #[test]
    fn s3_locations_match_whole_buckets_and_prefixes() {
        let p = policy(
            &["s3://data", "s3://lake/tables"],
            &["s3://data/lambdafusion"],
        );
        assert!(p.check_location("s3://data/t/").is_ok());
        assert!(p.check_location("s3://data/t/*.parquet").is_ok());
        assert!(p.check_location("s3://lake/tables/x/a.parquet").is_ok());
        assert!(p.check_location("s3://lake/tables").is_ok());
        for refused in [
            "s3://lake/tablesx/a",
            "s3://lake/other",
            "s3://data-private/t/",
            "s3://other/t",
            "s3://lake/tables/../secrets",
            "s3://lake/tables/%2E%2E/secrets",
            "s3://lake/tables%2F..%2Fsecrets",
        ] {
            assert!(p.check_location(refused).is_err(), "{refused}");
        }
        // The reserved prefix, however it is spelled: as the object store resolves it.
        for spelled in [
            "s3://data/lambdafusion%2Fjobs/",
            "s3://data/lambdafusion%2fjobs/",
            "s3://data/./lambdafusion/jobs/",
            "s3://data/x/../lambdafusion/jobs/",
            "s3://data//lambdafusion/jobs/",
            "s3://data/%6Cambdafusion/jobs",
            "s3://DATA/lambdafusion/jobs",
        ] {
            let e = p.check_location(spelled).unwrap_err();
            let e = e.to_string();
            assert!(
                e.contains("shuffle")
                    || e.contains("not a valid object key")
                    || e.contains("outside"),
                "{spelled}: {e}"
            );
        }
        // Encoded twice it names another key (`lambdafusion%2Fjobs` literally), which is
        // not the reserved prefix: allowed, and read as that literal key.
        assert!(p.check_location("s3://data/lambdafusion%252Fjobs/").is_ok());
        let e = p
            .check_location("s3://data/lambdafusion/jobs/x")
            .unwrap_err();
        assert!(e.to_string().contains("shuffle"), "{e}");
        let e = p.check_location("s3://data/").unwrap_err();
        assert!(
            e.to_string().contains("contains"),
            "a location around the reserved: {e}"
        );
        let e = policy(&[], &[]).check_location("s3://any/x").unwrap_err();
        assert!(e.to_string().contains("none are configured"), "{e}");
        assert!(e.to_string().contains("--allow-path"), "{e}");
    }

    #[test]
    fn local_locations_are_resolved_before_the_check() {
        let dir = tempfile::tempdir().unwrap();
        let allowed = dir.path().join("allowed");
        std::fs::create_dir_all(allowed.join("t")).unwrap();
        std::fs::write(allowed.join("t/a.csv"), "x\n1\n").unwrap();
        std::fs::create_dir_all(dir.path().join("secret")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("secret"), allowed.join("link")).unwrap();
        let p = policy(&[allowed.to_str().unwrap()], &[]);
        assert!(p
            .check_location(allowed.join("t/a.csv").to_str().unwrap())
            .is_ok());
        let url = format!("file://{}/t/", allowed.display());
        assert!(p.check_location(&url).is_ok(), "{url}");
        assert!(p
            .check_location(allowed.join("new/").to_str().unwrap())
            .is_ok());
        for refused in [
            "/etc/hostname".to_string(),
            "file:///etc/hostname".to_string(),
            format!("{}/t/../../secret/", allowed.display()),
            format!("{}/link/", allowed.display()),
            "http://example.com/x".to_string(),
        ] {
            assert!(p.check_location(&refused).is_err(), "{refused}");
        }
    }

    #[test]
    fn role_entries_match_every_session_and_session_entries_one() {
        let alice = "arn:aws:sts::111122223333:assumed-role/Analysts/alice";
        let bob = "arn:aws:sts::111122223333:assumed-role/Analysts/bob";
        for role in [
            "arn:aws:iam::111122223333:role/Analysts",
            "arn:aws:iam::111122223333:role/teams/data/Analysts",
            "arn:aws:sts::111122223333:assumed-role/Analysts",
        ] {
            assert!(listed(role, alice) && listed(role, bob), "{role}");
        }
        assert!(listed(alice, alice));
        assert!(!listed(alice, bob), "a session entry is that session alone");
        for other in [
            "arn:aws:iam::111122223333:role/Analysts2",
            "arn:aws:iam::444455556666:role/Analysts",
            "arn:aws:sts::111122223333:assumed-role/Analyst",
            "arn:aws:iam::111122223333:user/Analysts",
            "arn:aws:iam::111122223333:role/Analysts/extra",
        ] {
            assert!(!listed(other, alice), "{other}");
        }
        // Users match exactly; a user is never a role's session.
        let user = "arn:aws:iam::111122223333:user/alice";
        assert!(listed(user, user));
        assert!(!listed("arn:aws:iam::111122223333:role/alice", user));
        let china = "arn:aws-cn:sts::111122223333:assumed-role/Ops/x";
        assert!(listed("arn:aws-cn:iam::111122223333:role/Ops", china));
        assert!(!listed("arn:aws:iam::111122223333:role/Ops", china));
        let mut p = AccessPolicy {
            admins: vec!["arn:aws:iam::111122223333:role/Analysts".into()],
            catalog_writers: Some(vec![alice.into()]),
            ..AccessPolicy::default()
        };
        assert!(p.can_read(&Caller(bob.into()), "someone"));
        assert!(p.check_catalog_writer(&Caller(alice.into())).is_ok());
        assert!(p.check_catalog_writer(&Caller(bob.into())).is_err());
        p.admins.clear();
        assert!(
            !p.can_read(&Caller(bob.into()), alice),
            "jobs stay the session's own"
        );
    }

    #[test]
    fn callers_see_their_own_jobs_and_admins_all() {
        let mut p = AccessPolicy::default();
        let (alice, bob) = (Caller("alice".into()), Caller("bob".into()));
        assert!(p.can_read(&alice, "alice"));
        assert!(!p.can_read(&bob, "alice"));
        p.admins = vec!["bob".into()];
        assert!(p.can_read(&bob, "alice"));
        assert!(p.check_catalog_writer(&alice).is_ok());
        p.catalog_writers = Some(vec!["bob".into()]);
        assert!(p.check_catalog_writer(&bob).is_ok());
        let e = p.check_catalog_writer(&alice).unwrap_err();
        assert!(
            e.to_string().contains("LAMBDAFUSION_CATALOG_WRITERS"),
            "{e}"
        );
        assert_eq!(p.presign_lifetime(None), Duration::from_secs(900));
        assert_eq!(p.presign_lifetime(Some(43_200)), Duration::from_secs(900));
        assert_eq!(p.presign_lifetime(Some(60)), Duration::from_secs(60));
    }

    #[tokio::test]
    async fn the_confined_file_system_refuses_what_resolves_outside() {
        use object_store::ObjectStoreExt;
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(root.join("ok.txt"), "ok").unwrap();
        std::fs::write(dir.path().join("secret.txt"), "secret").unwrap();
        std::os::unix::fs::symlink(dir.path().join("secret.txt"), root.join("link.txt")).unwrap();
        let scratch = dir.path().join("scratch");
        std::fs::create_dir_all(&scratch).unwrap();
        let fs = ConfinedFileSystem::new(
            Arc::new(object_store::local::LocalFileSystem::new()),
            vec![root.clone()],
            vec![scratch.clone()],
        );
        let path = |p: &Path| ObjectPath::from_absolute_path(p).unwrap();
        let ok = fs.get(&path(&root.join("ok.txt"))).await.unwrap();
        assert_eq!(ok.bytes().await.unwrap(), "ok");
        for outside in [dir.path().join("secret.txt"), root.join("link.txt")] {
            let e = fs.get(&path(&outside)).await.unwrap_err();
            assert!(
                matches!(e, object_store::Error::PermissionDenied { .. }),
                "{e}"
            );
        }
        let listed: Vec<_> = fs
            .list(Some(&path(&root)))
            .map(|m| m.unwrap().location.to_string())
            .collect()
            .await;
        assert_eq!(listed.len(), 1, "the symlink out is not listed: {listed:?}");
        assert!(fs
            .list(Some(&path(dir.path())))
            .next()
            .await
            .unwrap()
            .is_err());
        // Readable roots are read-only: nothing is written, overwritten or deleted there.
        let refused = [
            fs.put(&path(&root.join("new.txt")), "x".into()).await,
            fs.put(&path(&root.join("ok.txt")), "x".into()).await,
            fs.put(&path(&dir.path().join("secret.txt")), "x".into())
                .await,
        ];
        for result in refused {
            let e = result.unwrap_err();
            assert!(
                matches!(e, object_store::Error::PermissionDenied { .. }),
                "{e}"
            );
            assert!(e.to_string().contains("read-only"), "{e}");
        }
        assert!(fs.put_multipart(&path(&root.join("m.txt"))).await.is_err());
        assert!(fs.delete(&path(&root.join("ok.txt"))).await.is_err());
        assert!(fs
            .copy(&path(&root.join("ok.txt")), &path(&root.join("copy.txt")))
            .await
            .is_err());
        assert_eq!(std::fs::read_to_string(root.join("ok.txt")).unwrap(), "ok");
        assert!(!root.join("new.txt").exists() && !root.join("copy.txt").exists());
        // The writable root takes writes, and is readable too.
        fs.put(&path(&scratch.join("out.bin")), "y".into())
            .await
            .unwrap();
        let back = fs.get(&path(&scratch.join("out.bin"))).await.unwrap();
        assert_eq!(back.bytes().await.unwrap(), "y");
        fs.copy(&path(&root.join("ok.txt")), &path(&scratch.join("c.txt")))
            .await
            .unwrap();
        fs.delete(&path(&scratch.join("c.txt"))).await.unwrap();
    }
}
