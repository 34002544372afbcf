//! Writes to Delta Lake tables: `CREATE TABLE t WITH (format = 'DELTA') AS query` makes a
//! new table, `INSERT INTO t query` appends to one. The tasks write Parquet files into the
//! table's directory as any write does ([`super::sink`]); the commit is one Delta commit
//! listing every task's files, made with the Delta kernel's transactions: the log entry
//! `_delta_log/<version>.json` is written only if absent (S3's conditional `PUT`,
//! `If-None-Match: *`; no lock table), so a table's readers see all of a write or none
//! of it.
//!
//! - **Exactly once.** A commit may run again (a scheduler crashed after it, or its
//!   request failed after it applied). An append carries a Delta transaction id
//!   (`txn`, application `lambdafusion-<job>`), and a commit that finds its id in the
//!   table's newest snapshot has nothing to do. A new table carries the job in its
//!   properties (`lambdafusion.query`): version 0 with this job's id is this job's.
//! - **Concurrent appends.** An append that finds its version taken (another writer
//!   committed first) starts again from the newest snapshot: blind appends commute. If
//!   the table's columns or partitioning changed meanwhile, the append fails with a
//!   conflict instead, and its files are deleted.

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, Int64Array, MapBuilder, MapFieldNames, RecordBatch, StringArray, StringBuilder,
    StructArray,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use datafusion::common::DFSchema;
use datafusion::logical_expr::LogicalPlan;
use delta_kernel::committer::FileSystemCommitter;
use delta_kernel::engine::arrow_conversion::TryFromArrow;
use delta_kernel::engine::arrow_data::ArrowEngineData;
use delta_kernel::schema::StructType;
use delta_kernel::snapshot::Snapshot;
use delta_kernel::transaction::create_table::create_table;
use delta_kernel::transaction::data_layout::DataLayout;
use delta_kernel::transaction::CommitResult;
use delta_kernel::Engine;
use url::Url;

use super::{WriteTarget, WrittenFile};
use crate::{Error, Result, Services};

/// The table property naming the query that created a table.
pub const CREATED_BY: &str = "lambdafusion.query";

/// What the commits say wrote them (`commitInfo.engineInfo`).
const ENGINE_INFO: &str = concat!("lambdafusion/", env!("CARGO_PKG_VERSION"));

/// Most times an append starts again after other writers' commits took its version.
const MAX_REBASES: usize = 50;

/// The types a Delta partition column of a write may have: those whose text (Arrow's
/// cast to a string) is the Delta protocol's serialization of the value.
fn partition_type_ok(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Utf8
            | DataType::LargeUtf8
            | DataType::Utf8View
            | DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::Date32
            | DataType::Boolean
    )
}

/// The type a column is written as in a Delta table: Delta's own types, so that every
/// reader reads the files as the log declares them — timestamps in microseconds (UTC
/// when they have a time zone), unsigned integers as the next wider signed ones, dates
/// as days, dictionaries as their values.
fn delta_type(data_type: &DataType) -> DataType {
    match data_type {
        DataType::Timestamp(_, tz) => {
            DataType::Timestamp(TimeUnit::Microsecond, tz.as_ref().map(|_| Arc::from("UTC")))
        }
        DataType::UInt8 => DataType::Int16,
        DataType::UInt16 => DataType::Int32,
        DataType::UInt32 | DataType::UInt64 => DataType::Int64,
        DataType::Date64 => DataType::Date32,
        DataType::Dictionary(_, value) => delta_type(value),
        other => other.clone(),
    }
}

/// `input` with its columns cast to the types a new Delta table stores
/// ([`delta_type`]); the same plan when they are those already.
pub fn cast_input(input: LogicalPlan) -> Result<LogicalPlan> {
    super::cast_columns(input, delta_type)
}

/// The Delta schema of a table of `columns` partitioned by `partition_by`: refused
/// (naming the column) when a column has no Delta type, or a partition column a type
/// this engine does not write as a partition value.
pub fn table_schema(columns: &DFSchema, partition_by: &[String]) -> Result<Arc<StructType>> {
    for name in partition_by {
        let field = columns.field_with_unqualified_name(name)?;
        if !partition_type_ok(field.data_type()) {
            return Err(Error::InvalidInput(format!(
                "Delta partition column {name} is {}: partition a Delta table by a string, \
                 an integer, a date or a boolean (cast it, or derive one such as a month)",
                field.data_type()
            )));
        }
    }
    let fields: Vec<Field> = columns
        .fields()
        .iter()
        .map(|f| Field::new(f.name(), f.data_type().clone(), true))
        .collect();
    let schema = StructType::try_from_arrow(&Schema::new(fields)).map_err(|e| {
        Error::InvalidInput(format!("a Delta table cannot hold these columns: {e}"))
    })?;
    Ok(Arc::new(schema))
}

/// Whether two Delta schemas have the same columns (names and types, in order).
fn same_columns(a: &StructType, b: &StructType) -> bool {
    a.fields().len() == b.fields().len()
        && a.fields()
            .zip(b.fields())
            .all(|(x, y)| x.name() == y.name() && x.data_type() == y.data_type())
}

/// The table directory's URL (ending in `/`) and a kernel engine over its store.
fn engine_for(services: &Services, location: &str) -> Result<(Url, Arc<dyn Engine>)> {
    let root = crate::delta::table_root(location)?;
    let store = services
        .runtime
        .object_store(crate::delta::store_url(&root)?)
        .map_err(Error::from)?;
    let engine: Arc<dyn Engine> =
        Arc::new(delta_kernel_engine::DefaultEngine::builder(store).build());
    Ok((root, engine))
}

/// `path` (the URL of a file under `location`) as an `add` action's path: relative to
/// the table's directory and URL-encoded, so that every reader finds the object this
/// engine wrote (its key may hold `%` escapes of its own).
fn log_path(location: &str, path: &str) -> Result<String> {
    let relative = path
        .strip_prefix(location)
        .ok_or_else(|| Error::Internal(format!("written file {path} is not under {location}")))?;
    let mut encoded = String::with_capacity(relative.len());
    for byte in relative.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~/=".contains(&byte) {
            encoded.push(byte as char);
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    Ok(encoded)
}

/// The kernel's input for the `add` actions of `files` (`Transaction::add_files_schema`:
/// path, partition values, size, time, and the statistics this engine knows: rows).
fn add_files(target: &WriteTarget, files: &[WrittenFile], now_ms: i64) -> Result<RecordBatch> {
    let names = MapFieldNames {
        entry: "key_value".into(),
        key: "key".into(),
        value: "value".into(),
    };
    let mut partitions = MapBuilder::new(Some(names), StringBuilder::new(), StringBuilder::new());
    let mut paths = Vec::with_capacity(files.len());
    for file in files {
        paths.push(log_path(&target.location, &file.path)?);
        for column in &target.partition_by {
            partitions.keys().append_value(column);
            match file
                .partition
                .as_ref()
                .and_then(|p| p.get(column).cloned().flatten())
            {
                Some(value) => partitions.values().append_value(value),
                None => partitions.values().append_null(),
            }
        }
        partitions.append(true)?;
    }
    let partitions = partitions.finish();
    let stats = stats_array(target, files)?;
    let schema = Schema::new(vec![
        Field::new("path", DataType::Utf8, false),
        Field::new("partitionValues", partitions.data_type().clone(), false),
        Field::new("size", DataType::Int64, false),
        Field::new("modificationTime", DataType::Int64, false),
        Field::new("stats", stats.data_type().clone(), true),
    ]);
    Ok(RecordBatch::try_new(
        Arc::new(schema),
        vec![
            Arc::new(StringArray::from(paths)),
            Arc::new(partitions),
            Arc::new(Int64Array::from_iter_values(
                files.iter().map(|f| f.bytes as i64),
            )),
            Arc::new(Int64Array::from_iter_values(files.iter().map(|_| now_ms))),
            Arc::new(stats),
        ],
    )?)
}

/// The files' statistics as the kernel takes them: each file's `stats` JSON (its rows
/// alone when the writer gave none) read into one struct of the table's columns.
fn stats_array(target: &WriteTarget, files: &[WrittenFile]) -> Result<StructArray> {
    let columns = crate::plan::decode_schema(&target.schema)?;
    let fields: Vec<Field> = columns
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    let schema = Arc::new(super::stats::stats_schema(&fields));
    let mut lines = String::new();
    for file in files {
        match &file.stats {
            Some(stats) => lines.push_str(stats),
            None => lines.push_str(&format!("{{\"numRecords\":{}}}", file.rows)),
        }
        lines.push('\n');
    }
    let reader = datafusion::arrow::json::ReaderBuilder::new(schema.clone())
        .with_batch_size(files.len().max(1))
        .build(std::io::Cursor::new(lines.into_bytes()))?;
    let batches = reader.collect::<std::result::Result<Vec<_>, _>>()?;
    let batch = datafusion::arrow::compute::concat_batches(&schema, &batches)?;
    Ok(StructArray::from(batch))
}

/// Commits `files` to the Delta table of `target`: creates it (a `CREATE TABLE ... AS`)
/// or appends to it (`INSERT INTO`). Returns the version committed, or the one an
/// earlier run of this commit made. A commit run again does nothing more.
pub async fn commit(
    services: &Services,
    target: &WriteTarget,
    files: &[WrittenFile],
) -> Result<u64> {
    let (root, engine) = engine_for(services, &target.location)?;
    let now_ms = crate::time::now_ms() as i64;
    let adds = add_files(target, files, now_ms)?;
    let target = target.clone();
    tokio::task::spawn_blocking(move || commit_blocking(engine.as_ref(), &root, &target, adds))
        .await
        .map_err(|e| Error::Internal(format!("the Delta commit stopped: {e}")))?
}

/// Commits between checkpoints when the table does not say (`delta.checkpointInterval`),
/// as Delta's own writers do.
const CHECKPOINT_INTERVAL: u64 = 10;

/// Writes a checkpoint of `snapshot` (the version an append just committed) when its
/// version is a multiple of the table's checkpoint interval, so that readers replay at
/// most that many commits after it however often a table is appended to. Best effort:
/// a checkpoint is an optimization, its failure is logged and the append stands.
fn checkpoint_if_due(
    engine: &dyn Engine,
    snapshot: &delta_kernel::snapshot::SnapshotRef,
    label: &str,
) {
    let interval = snapshot
        .table_properties()
        .checkpoint_interval
        .map_or(CHECKPOINT_INTERVAL, |n| n.get());
    if snapshot.version() == 0 || !snapshot.version().is_multiple_of(interval) {
        return;
    }
    if let Err(e) = snapshot.checkpoint(engine, None) {
        tracing::warn!(table = %label, version = snapshot.version(), error = %e,
            "could not write the Delta checkpoint; readers replay more commits until the next");
    }
}

/// Whether the Delta commit of `target`'s job is in the table's log.
pub async fn committed(services: &Services, target: &WriteTarget) -> Result<bool> {
    let (root, engine) = engine_for(services, &target.location)?;
    let target = target.clone();
    tokio::task::spawn_blocking(move || -> Result<bool> {
        let engine = engine.as_ref();
        if target.append {
            let snapshot = Snapshot::builder_for(root.as_str())
                .build(engine)
                .map_err(|e| kernel(&target, e))?;
            let found = snapshot
                .get_app_id_version(&app_id(&target), engine)
                .map_err(|e| kernel(&target, e))?;
            return Ok(found.is_some());
        }
        match Snapshot::builder_for(root.as_str())
            .at_version(0)
            .build(engine)
        {
            Ok(first) => {
                Ok(first.table_properties().unknown_properties.get(CREATED_BY)
                    == Some(&target.job_id))
            }
            Err(e) if crate::delta::is_missing(&e) => Ok(false),
            Err(e) => Err(kernel(&target, e)),
        }
    })
    .await
    .map_err(|e| Error::Internal(format!("the Delta log check stopped: {e}")))?
}

/// The Delta transaction id (`txn.appId`) of an append by `target`'s job.
fn app_id(target: &WriteTarget) -> String {
    format!("lambdafusion-{}", target.job_id)
}

/// The kernel's error as ours: a storage error stays one (a transient one retries the
/// scheduler's step, and the commit, which is idempotent, runs again).
fn kernel(target: &WriteTarget, e: delta_kernel::Error) -> Error {
    match e {
        delta_kernel::Error::ObjectStore(e) => Error::ObjectStore(e),
        e => Error::Internal(format!("Delta commit to {}: {e}", target.location)),
    }
}

fn commit_blocking(
    engine: &dyn Engine,
    root: &Url,
    target: &WriteTarget,
    adds: RecordBatch,
) -> Result<u64> {
    let schema = crate::plan::decode_schema(&target.table_schema)?;
    let columns = DFSchema::try_from(schema.as_ref().clone())?;
    let planned = table_schema(&columns, &target.partition_by)?;
    let label = target.table.as_deref().unwrap_or("the table");
    if !target.append {
        let layout = if target.partition_by.is_empty() {
            DataLayout::None
        } else {
            DataLayout::partitioned(&target.partition_by)
        };
        let created = create_table(root.as_str(), planned, ENGINE_INFO)
            .with_table_properties([(CREATED_BY, target.job_id.as_str())])
            .with_data_layout(layout)
            .build(engine, Box::new(FileSystemCommitter::new()));
        if let Ok(mut txn) = created {
            txn.add_files(Box::new(ArrowEngineData::new(adds)));
            if let CommitResult::CommittedTransaction(c) =
                txn.commit(engine).map_err(|e| kernel(target, e))?
            {
                return Ok(c.commit_version());
            }
        }
        // The table exists: this job's (the commit ran before) or another writer's.
        let first = Snapshot::builder_for(root.as_str())
            .at_version(0)
            .build(engine)
            .map_err(|e| kernel(target, e))?;
        let creator = first.table_properties().unknown_properties.get(CREATED_BY);
        if creator == Some(&target.job_id) {
            return Ok(0);
        }
        return Err(Error::Conflict(format!(
            "a Delta table was created at {} meanwhile by another writer: {label}'s files \
             are discarded",
            target.location
        )));
    }
    let app_id = app_id(target);
    for _ in 0..MAX_REBASES {
        let snapshot = Snapshot::builder_for(root.as_str())
            .build(engine)
            .map_err(|e| kernel(target, e))?;
        if snapshot
            .get_app_id_version(&app_id, engine)
            .map_err(|e| kernel(target, e))?
            .is_some()
        {
            // Committed by an earlier run of this commit: the version is not recorded.
            return Ok(snapshot.version());
        }
        let partitions = snapshot
            .table_configuration()
            .metadata()
            .partition_columns()
            .to_vec();
        if !same_columns(&snapshot.schema(), &planned) || partitions != target.partition_by {
            return Err(Error::Conflict(format!(
                "{label}'s columns or partitioning changed (version {}) while this INSERT \
                 ran: its files are discarded; run it again",
                snapshot.version()
            )));
        }
        let mut txn = snapshot
            .transaction(Box::new(FileSystemCommitter::new()), engine)
            .map_err(|e| Error::InvalidInput(format!("cannot append to Delta table {label}: {e}")))?
            .with_blind_append()
            .with_operation("WRITE".into())
            .with_engine_info(ENGINE_INFO)
            .with_transaction_id(app_id.clone(), 1);
        txn.add_files(Box::new(ArrowEngineData::new(adds.clone())));
        match txn.commit(engine).map_err(|e| kernel(target, e))? {
            CommitResult::CommittedTransaction(c) => {
                if let Some(snapshot) = c.post_commit_snapshot() {
                    checkpoint_if_due(engine, snapshot, label);
                }
                return Ok(c.commit_version());
            }
            // Another writer took the version: start again from the newest snapshot.
            CommitResult::ConflictedTransaction(_) | CommitResult::RetryableTransaction(_) => {}
        }
    }
    Err(Error::Conflict(format!(
        "{label} took {MAX_REBASES} other commits while this INSERT tried to commit: its \
         files are discarded; run it again"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_paths_are_relative_and_escape_what_the_key_escapes() {
        let at = "s3://b/t/";
        assert_eq!(
            log_path(at, "s3://b/t/j-00001-ab-000.parquet").unwrap(),
            "j-00001-ab-000.parquet"
        );
        // A key holding `%2F` (a `/` in a partition value) keeps it through the decode.
        assert_eq!(
            log_path(at, "s3://b/t/k=a%2Fb c/f.parquet").unwrap(),
            "k=a%252Fb%20c/f.parquet"
        );
        assert!(log_path(at, "s3://other/f.parquet").is_err());
    }

    #[test]
    fn new_tables_store_delta_types() {
        assert_eq!(
            delta_type(&DataType::Timestamp(
                TimeUnit::Nanosecond,
                Some("+00:00".into())
            )),
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
        );
        assert_eq!(delta_type(&DataType::UInt32), DataType::Int64);
        assert_eq!(delta_type(&DataType::Utf8View), DataType::Utf8View);
    }

    #[test]
    fn partition_columns_of_other_types_are_refused_by_name() {
        let schema = DFSchema::try_from(Schema::new(vec![
            Field::new("x", DataType::Float64, true),
            Field::new("y", DataType::Int64, true),
        ]))
        .unwrap();
        let e = table_schema(&schema, &["x".into()])
            .unwrap_err()
            .to_string();
        assert!(e.contains("partition column x is Float64"), "{e}");
        assert!(table_schema(&schema, &["y".into()]).is_ok());
    }
}
