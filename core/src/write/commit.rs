//! Making a write visible, or not at all: the commit's manifest and the table it creates
//! ([`commit`]), the clean-up of a write that failed ([`discard`]) and the sweep's last
//! clean-up ([`last_clean_up`]).

use std::collections::{BTreeMap, HashSet};

use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::datatypes::UInt64Type;
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use serde::{Deserialize, Serialize};

use crate::state::TaskOutput;
use crate::{Error, Result, Services};

use super::{sink, store_of, WriteFormat, WriteTarget, MANIFEST};

/// The manifest's contents.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Always `lambdafusion`.
    pub committer: String,
    /// The job that wrote the files.
    pub job_id: String,
    /// The files' format.
    pub format: WriteFormat,
    /// Rows in all.
    pub rows: u64,
    /// Bytes in all.
    pub bytes: u64,
    /// Every file, with its rows and bytes.
    pub files: Vec<WrittenFile>,
    /// A Delta write's version of the table, an Iceberg write's metadata version (no
    /// manifest is written: the table's log is it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delta_version: Option<u64>,
}

impl Manifest {
    /// The manifest of `target`'s `files` (and the Delta version that lists them).
    fn of(target: &WriteTarget, files: &[WrittenFile], delta_version: Option<u64>) -> Self {
        Manifest {
            committer: "lambdafusion".into(),
            job_id: target.job_id.clone(),
            format: target.format,
            rows: files.iter().map(|f| f.rows).sum(),
            bytes: files.iter().map(|f| f.bytes).sum(),
            files: files.to_vec(),
            delta_version,
        }
    }
}

/// One file of a write.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WrittenFile {
    /// Its URL.
    pub path: String,
    /// Rows in it.
    pub rows: u64,
    /// Its size.
    pub bytes: u64,
    /// A partitioned write's partition values of the file, as text (NULL and empty are
    /// null).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<BTreeMap<String, Option<String>>>,
    /// A Delta write's statistics of the file (the `stats` JSON of its `add` action).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stats: Option<String>,
}

/// The files the committed attempts of the writing stage wrote (its tasks' outputs).
pub async fn written_files(
    services: &Services,
    stage: u32,
    outputs: Vec<TaskOutput>,
) -> Result<Vec<WrittenFile>> {
    let batches: Vec<RecordBatch> =
        crate::results::read_outputs(services, stage, outputs, sink::file_list_schema())?
            .try_collect()
            .await?;
    let mut files = Vec::new();
    for batch in batches {
        let paths = batch.column(0).as_string::<i32>();
        let rows = batch.column(1).as_primitive::<UInt64Type>();
        let bytes = batch.column(2).as_primitive::<UInt64Type>();
        let partitions = batch.column(3).as_string::<i32>();
        let stats = batch.column(4).as_string::<i32>();
        for i in 0..batch.num_rows() {
            let partition = if partitions.is_null(i) {
                None
            } else {
                Some(serde_json::from_str(partitions.value(i)).map_err(|e| {
                    Error::Internal(format!("a written file's partition values: {e}"))
                })?)
            };
            files.push(WrittenFile {
                path: paths.value(i).to_string(),
                rows: rows.value(i),
                bytes: bytes.value(i),
                partition,
                stats: (!stats.is_null(i)).then(|| stats.value(i).to_string()),
            });
        }
    }
    Ok(files)
}

/// The outputs of the writing (final) stage's committed task attempts, by partition:
/// the file lists a commit reads ([`written_files`]).
pub fn final_outputs(snapshot: &crate::state::JobSnapshot) -> Vec<TaskOutput> {
    let mut tasks: Vec<_> = snapshot
        .tasks_of(snapshot.job.final_stage())
        .filter(|t| t.state == crate::state::TaskState::Succeeded)
        .collect();
    tasks.sort_by_key(|t| t.partition);
    tasks.iter().filter_map(|t| t.output.clone()).collect()
}

/// The files of a write's committed task attempts, from its job's snapshot: those its
/// commit lists (what [`last_clean_up`] keeps of a Delta or Iceberg write).
pub async fn committed_files(
    services: &Services,
    snapshot: &crate::state::JobSnapshot,
) -> Result<Vec<WrittenFile>> {
    written_files(
        services,
        snapshot.job.final_stage(),
        final_outputs(snapshot),
    )
    .await
}

/// Makes a finished write visible: writes the manifest listing `files` (unless this job
/// already did: a commit is re-run after a crash), then deletes every other file of the
/// job under the location. A manifest of another job there is a conflict. A Delta or an
/// Iceberg write commits to the table's log instead ([`super::delta::commit`],
/// [`super::iceberg::commit`]).
pub async fn commit(
    services: &Services,
    target: &WriteTarget,
    files: &[WrittenFile],
) -> Result<Manifest> {
    let (store, root) = store_of(services, &target.location)?;
    if target.format.has_log() {
        let version = match target.format {
            WriteFormat::Iceberg => super::iceberg::commit(services, target, files).await?,
            _ => super::delta::commit(services, target, files).await?,
        };
        delete_strays(store.as_ref(), &root, target, files).await?;
        if let (Some(name), false) = (&target.table, target.append) {
            create_table(services, target, name).await?;
        }
        return Ok(Manifest::of(target, files, Some(version)));
    }
    let mut files = files.to_vec();
    if files.is_empty() {
        // No rows: one file of no rows, so that the columns are there to read.
        files.push(empty_file(store.as_ref(), &root, target).await?);
    }
    let files = files.as_slice();
    let manifest = Manifest::of(target, files, None);
    let path = root.clone().join(MANIFEST);
    let body = serde_json::to_vec_pretty(&manifest).map_err(|e| Error::Internal(e.to_string()))?;
    let put = store
        .put_opts(
            &path,
            PutPayload::from(body),
            PutOptions::from(PutMode::Create),
        )
        .await;
    match put {
        Ok(_) => {}
        Err(object_store::Error::AlreadyExists { .. }) => {
            let there = read_manifest(store.as_ref(), &path).await?;
            if there.as_ref().map(|m| m.job_id.as_str()) != Some(target.job_id.as_str()) {
                return Err(Error::Conflict(format!(
                    "{} was written meanwhile by another statement (its {MANIFEST} names \
                     {}): this one's files are discarded",
                    target.location,
                    there.map_or("another writer".into(), |m| format!("query {}", m.job_id))
                )));
            }
        }
        Err(e) => return Err(e.into()),
    }
    delete_strays(store.as_ref(), &root, target, files).await?;
    if let Some(name) = &target.table {
        create_table(services, target, name).await?;
    }
    Ok(manifest)
}

/// Writes the one file of a write of no rows: its columns and no rows.
async fn empty_file(
    store: &dyn ObjectStore,
    root: &Path,
    target: &WriteTarget,
) -> Result<WrittenFile> {
    let schema = crate::plan::decode_schema(&target.schema)?;
    let body = match target.format {
        WriteFormat::Parquet | WriteFormat::Delta | WriteFormat::Iceberg => {
            let mut writer = datafusion::parquet::arrow::ArrowWriter::try_new(
                Vec::new(),
                schema,
                Some(target.parquet_properties()?),
            )
            .map_err(|e| Error::Internal(e.to_string()))?;
            writer
                .finish()
                .map_err(|e| Error::Internal(e.to_string()))?;
            std::mem::take(writer.inner_mut())
        }
        WriteFormat::Csv if target.csv_header() => {
            let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
            let delimiter = (target.csv_delimiter()? as char).to_string();
            format!("{}\n", names.join(&delimiter)).into_bytes()
        }
        WriteFormat::Csv | WriteFormat::Json => Vec::new(),
    };
    let name = format!("{}-empty-000.{}", target.job_id, target.format.extension());
    let bytes = body.len() as u64;
    store
        .put(&root.clone().join(name.as_str()), PutPayload::from(body))
        .await?;
    Ok(WrittenFile {
        path: format!("{}{name}", target.location),
        rows: 0,
        bytes,
        partition: None,
        stats: None,
    })
}

/// Creates the catalog table of a `CREATE TABLE ... AS` over its committed files; a
/// commit run again finds it created. A table of that name created meanwhile by another
/// statement is a conflict.
async fn create_table(services: &Services, target: &WriteTarget, name: &str) -> Result<()> {
    use datafusion::logical_expr::{DdlStatement, LogicalPlan};
    let ddl = target.table_ddl(name);
    // Ours when it was created with this statement (its location is this write's alone):
    // a commit run again, or two steps of this job committing at once.
    let ours = |existing: Option<crate::state::TableRecord>| -> Result<()> {
        match existing {
            Some(t) if t.ddl == ddl => Ok(()),
            _ => Err(Error::Conflict(format!(
                "table {name} was created meanwhile by another statement: this one's files at \
                 {} are discarded",
                target.location
            ))),
        }
    };
    if let Some(existing) = services.store.get_table(name).await? {
        return ours(Some(existing));
    }
    let state = services.session_state(1);
    let plan = state.create_logical_plan(&ddl).await?;
    let LogicalPlan::Ddl(DdlStatement::CreateExternalTable(cmd)) = plan else {
        return Err(Error::Internal(format!(
            "{ddl} is not CREATE EXTERNAL TABLE"
        )));
    };
    match crate::catalog::create_table(
        &state,
        services.store.as_ref(),
        &services.config.access,
        &cmd,
        &ddl,
    )
    .await
    {
        Ok(_) => Ok(()),
        Err(Error::InvalidInput(why)) if why.contains("already exists") => {
            ours(services.store.get_table(name).await?)
        }
        Err(e) => Err(e),
    }
}

/// Deletes every file of the job under the location that `files` (its manifest's) does
/// not list: those of attempts that lost, crashed or were duplicated.
async fn delete_strays(
    store: &dyn ObjectStore,
    root: &Path,
    target: &WriteTarget,
    files: &[WrittenFile],
) -> Result<usize> {
    let keep: HashSet<&str> = files.iter().map(|f| f.path.as_str()).collect();
    let strays = job_files(store, root, target)
        .await?
        .into_iter()
        .filter(|(_, url)| !keep.contains(url.as_str()))
        .map(|(path, _)| path)
        .collect();
    Ok(delete(store, strays).await)
}

/// The last clean-up of the write of the job `snapshot` shows, run by the sweep once no
/// attempt of it can still be running (the task timeout after the job ended): an attempt
/// that died after the commit (or after the clean-up of a write that failed) left files
/// no one else will delete. Deletes every file of the job the manifest does not list —
/// all of them, and a manifest of the job, when the job did not succeed. Best effort:
/// returns how many objects it deleted.
///
/// A Delta or an Iceberg write asks the table's log whether it committed (whatever the
/// job's state says: a cancel may race the commit), and keeps the files of the job's
/// committed task attempts (those the commit listed) if it did.
pub async fn last_clean_up(services: &Services, snapshot: &crate::state::JobSnapshot) -> usize {
    let Some(target) = &snapshot.job.write else {
        return 0;
    };
    let Ok((store, root)) = store_of(services, &target.location) else {
        return 0;
    };
    if target.format.has_log() {
        // Only a table with a log reads its tasks' file lists here: a manifest lists the
        // rest's.
        let committed = match target.format {
            WriteFormat::Iceberg => super::iceberg::committed(services, target).await,
            _ => super::delta::committed(services, target).await,
        };
        // A committed write whose file list cannot be read keeps every file: deleting
        // by an empty list would delete what the table lists.
        let keep = match committed {
            Ok(true) => committed_files(services, snapshot).await,
            Ok(false) => Ok(Vec::new()),
            Err(e) => Err(e),
        };
        let keep = match keep {
            Ok(keep) => keep,
            Err(e) => {
                tracing::warn!(job_id = %target.job_id, error = %e,
                    "cannot tell which files a table write committed: its files are left");
                return 0;
            }
        };
        return delete_strays(store.as_ref(), &root, target, &keep)
            .await
            .unwrap_or(0);
    }
    if snapshot.job.state != crate::state::JobState::Succeeded {
        return discard(services, target).await;
    }
    match read_manifest(store.as_ref(), &root.clone().join(MANIFEST)).await {
        Ok(Some(m)) if m.job_id == target.job_id => {
            delete_strays(store.as_ref(), &root, target, &m.files)
                .await
                .unwrap_or(0)
        }
        _ => 0,
    }
}

/// Deletes every file of a write that will not be committed (its job failed or was
/// cancelled), and its manifest if the job wrote one. Best effort: returns how many
/// objects it deleted.
///
/// A Delta or an Iceberg write's files are left to the sweep's last clean-up, which asks
/// the table's log: a cancel may race the commit, and a file the log lists must never be
/// deleted. Until then they are invisible to the table's readers (no commit lists them).
pub async fn discard(services: &Services, target: &WriteTarget) -> usize {
    if target.format.has_log() {
        return 0;
    }
    let Ok((store, root)) = store_of(services, &target.location) else {
        return 0;
    };
    let mut paths = Vec::new();
    let manifest = root.clone().join(MANIFEST);
    if let Ok(Some(m)) = read_manifest(store.as_ref(), &manifest).await {
        if m.job_id == target.job_id {
            paths.push(manifest);
        }
    }
    if let Ok(files) = job_files(store.as_ref(), &root, target).await {
        paths.extend(files.into_iter().map(|(path, _)| path));
    }
    delete(store.as_ref(), paths).await
}

async fn read_manifest(store: &dyn ObjectStore, path: &Path) -> Result<Option<Manifest>> {
    match store.get(path).await {
        Ok(got) => {
            let bytes = got.bytes().await?;
            Ok(serde_json::from_slice(&bytes).ok())
        }
        Err(object_store::Error::NotFound { .. }) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Every file under the location named as the job's ([`sink`]), with its URL.
async fn job_files(
    store: &dyn ObjectStore,
    root: &Path,
    target: &WriteTarget,
) -> Result<Vec<(Path, String)>> {
    let prefix = format!("{}-", target.job_id);
    let objects: Vec<_> = store.list(Some(root)).try_collect().await?;
    Ok(objects
        .into_iter()
        .filter(|o| {
            o.location
                .filename()
                .is_some_and(|f| f.starts_with(&prefix))
        })
        .map(|o| {
            let relative = o
                .location
                .as_ref()
                .strip_prefix(root.as_ref())
                .unwrap_or(o.location.as_ref())
                .trim_start_matches('/')
                .to_string();
            (o.location, format!("{}{relative}", target.location))
        })
        .collect())
}

async fn delete(store: &dyn ObjectStore, paths: Vec<Path>) -> usize {
    let mut deleted = 0;
    for path in paths {
        if store.delete(&path).await.is_ok() {
            deleted += 1;
        }
    }
    deleted
}
