//! An Iceberg snapshot's files, from its manifest list and manifests (Avro, read with
//! `arrow-avro`): the live data files with their metrics, and the delete files — position
//! and equality — matched to the data files they apply to by the spec's rules.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray, Int64Array, RecordBatch, StringArray, StructArray};
use datafusion::arrow::datatypes::DataType;
use datafusion::error::{DataFusionError, Result as DfResult};
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::ObjectStore;
use url::Url;

use super::{file_inside, read, SnapshotEntry};
use crate::format_scan::DeleteFile;

/// Largest delete file a task reads whole (a table with a larger one is refused).
const MAX_DELETE_FILE_BYTES: u64 = 256 * 1024 * 1024;

/// The record batches of an Avro object container file, read with the schema it was
/// written with — less the records of no fields (an unpartitioned table's `partition`),
/// which Arrow cannot hold.
fn avro_batches(bytes: bytes::Bytes, what: &str) -> DfResult<Vec<RecordBatch>> {
    use arrow_avro::reader::{read_header_info, ReaderBuilder};
    let unreadable = |e: &dyn fmt::Display| {
        DataFusionError::Plan(format!("{what} is not a readable Avro file: {e}"))
    };
    let info = read_header_info(std::io::Cursor::new(bytes.clone())).map_err(|e| unreadable(&e))?;
    let writer = info.writer_schema().map_err(|e| unreadable(&e))?;
    let mut builder = ReaderBuilder::new();
    let mut schema: serde_json::Value =
        serde_json::from_str(&writer.json_string).map_err(|e| unreadable(&e))?;
    if drop_empty_records(&mut schema) {
        builder =
            builder.with_reader_schema(arrow_avro::schema::AvroSchema::new(schema.to_string()));
    }
    let reader = builder
        .build(std::io::Cursor::new(bytes))
        .map_err(|e| unreadable(&e))?;
    reader
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| DataFusionError::Plan(format!("{what}: {e}")))
}

/// Removes every record field whose type is a record of no fields; true if any was.
fn drop_empty_records(schema: &mut serde_json::Value) -> bool {
    use serde_json::Value;
    let empty_record = |t: &Value| {
        t.get("type").and_then(Value::as_str) == Some("record")
            && t.get("fields")
                .and_then(Value::as_array)
                .is_some_and(|f| f.is_empty())
    };
    match schema {
        Value::Array(items) => items
            .iter_mut()
            .fold(false, |changed, t| drop_empty_records(t) | changed),
        Value::Object(object) => {
            let mut changed = false;
            if let Some(Value::Array(fields)) = object.get_mut("fields") {
                let before = fields.len();
                fields.retain(|f| !f.get("type").is_some_and(empty_record));
                changed = fields.len() != before;
                for field in fields.iter_mut() {
                    if let Some(t) = field.get_mut("type") {
                        changed |= drop_empty_records(t);
                    }
                }
            }
            for key in ["items", "values"] {
                if let Some(t) = object.get_mut(key) {
                    changed |= drop_empty_records(t);
                }
            }
            changed
        }
        _ => false,
    }
}

fn strings(array: &dyn Array) -> DfResult<StringArray> {
    let cast = datafusion::arrow::compute::cast(array, &DataType::Utf8)?;
    Ok(cast.as_string::<i32>().clone())
}

fn ints(array: Option<&Arc<dyn Array>>) -> DfResult<Option<Int64Array>> {
    array
        .map(|a| {
            let cast = datafusion::arrow::compute::cast(a, &DataType::Int64)?;
            Ok(cast
                .as_primitive::<datafusion::arrow::datatypes::Int64Type>()
                .clone())
        })
        .transpose()
}

/// One data file of a snapshot.
#[derive(Debug, Clone)]
pub(super) struct DataFile {
    pub(super) path: Path,
    /// The file as the metadata names it (what position delete files name).
    pub(super) name: String,
    pub(super) size: u64,
    pub(super) records: Option<u64>,
    /// Its data sequence number (0 in format v1).
    pub(super) sequence: i64,
    /// The position delete files that apply to it.
    pub(super) deletes: Vec<DeleteFile>,
    /// The equality delete files that apply to it.
    pub(super) equality: Vec<EqualityDelete>,
    /// Its partition: the spec it was written with and its values, rendered (`None` when
    /// the spec has no fields).
    pub(super) partition: (i64, Option<String>),
    /// Its column metrics as the manifest keeps them, for pruning.
    pub(super) metrics: Metrics,
}

/// An equality delete file of a snapshot, with what decides the data files it applies to.
#[derive(Debug, Clone)]
pub(super) struct EqualityDelete {
    pub(super) file: DeleteFile,
    pub(super) sequence: i64,
    /// The key: `equality_ids`.
    pub(super) field_ids: Vec<i32>,
    /// Its partition, as [`DataFile::partition`].
    pub(super) partition: (i64, Option<String>),
}

impl EqualityDelete {
    /// Whether it may delete rows of `data` (the spec's rule: the data file's sequence
    /// number is below the delete file's, and an equality delete file of a partitioned
    /// spec applies to its own partition only).
    fn applies_to(&self, data: &DataFile) -> bool {
        data.sequence < self.sequence
            && (self.partition.1.is_none() || self.partition == data.partition)
    }
}

/// A data file's column metrics from its manifest entry, by field id: the lower and upper
/// bounds (Iceberg's single-value serialization) and the null counts.
#[derive(Debug, Clone, Default)]
pub(super) struct Metrics {
    pub(super) lower: HashMap<i32, Vec<u8>>,
    pub(super) upper: HashMap<i32, Vec<u8>>,
    pub(super) nulls: HashMap<i32, u64>,
}

/// A position delete file of a snapshot, with what decides the data files it applies to.
#[derive(Debug, Clone)]
struct PositionDeletes {
    file: DeleteFile,
    sequence: i64,
    /// `referenced_data_file`: the one data file it deletes from, when the writer says.
    referenced: Option<String>,
    /// The lower and upper bounds of its `file_path` column, when the writer kept them.
    bounds: Option<(Vec<u8>, Vec<u8>)>,
}

impl PositionDeletes {
    /// Whether it may delete rows of `data` (the spec's rule: the data file's sequence
    /// number is at most the delete file's, and the delete file may name the data file).
    fn applies_to(&self, data: &DataFile) -> bool {
        data.sequence <= self.sequence
            && self.referenced.as_ref().is_none_or(|r| *r == data.name)
            && self.bounds.as_ref().is_none_or(|(low, high)| {
                low.as_slice() <= data.name.as_bytes() && data.name.as_bytes() <= high.as_slice()
            })
    }
}

/// The reserved field id of a position delete file's `file_path` column.
const FILE_PATH_FIELD_ID: i32 = 2147483546;

/// One live entry of a manifest.
enum Entry {
    Data(DataFile),
    PositionDeletes(PositionDeletes),
    EqualityDeletes(EqualityDelete),
}

/// A manifest as its snapshot's manifest list lists it.
struct Manifest {
    path: String,
    /// 0: data files, 1: delete files.
    content: i64,
    /// The sequence number its added entries inherit.
    sequence: i64,
    /// The partition spec its files were written with.
    spec_id: i64,
}

/// The data files of `snapshot`, each with the position delete files that apply to it:
/// its manifest list's manifests, their live entries.
pub(super) async fn data_files(
    store: &dyn ObjectStore,
    root: &Url,
    snapshot: &SnapshotEntry,
    refuse: &(dyn Fn(String) -> DataFusionError + Sync),
) -> DfResult<Vec<DataFile>> {
    let resolve = |p: &str, what: &str| file_inside(root, p, what);
    let mut manifests = Vec::new();
    if let Some(list) = &snapshot.manifest_list {
        let path = resolve(list, "the manifest list")?;
        for batch in avro_batches(read(store, &path, "manifest list").await?, list)? {
            let paths = strings(batch.column_by_name("manifest_path").ok_or_else(|| {
                refuse(format!("its manifest list {list} has no manifest_path"))
            })?)?;
            let content = ints(batch.column_by_name("content"))?;
            let sequence = ints(batch.column_by_name("sequence_number"))?;
            let spec = ints(batch.column_by_name("partition_spec_id"))?;
            let value = |a: &Option<Int64Array>, i: usize| {
                a.as_ref()
                    .filter(|a| a.is_valid(i))
                    .map_or(0, |a| a.value(i))
            };
            for i in 0..batch.num_rows() {
                manifests.push(Manifest {
                    path: paths.value(i).to_string(),
                    content: value(&content, i),
                    sequence: value(&sequence, i),
                    spec_id: value(&spec, i),
                });
            }
        }
    } else {
        manifests.extend(snapshot.manifests.iter().map(|m| Manifest {
            path: m.clone(),
            content: 0,
            sequence: 0,
            spec_id: 0,
        }));
    }
    let per_manifest: Vec<Vec<Entry>> =
        futures::stream::iter(manifests.into_iter().map(|m| async move {
            let path = resolve(&m.path, "a manifest")?;
            let mut out = Vec::new();
            for batch in avro_batches(read(store, &path, "manifest").await?, &m.path)? {
                out.extend(manifest_entries(&batch, &m, &resolve, refuse)?);
            }
            Ok::<_, DataFusionError>(out)
        }))
        .buffered(16)
        .try_collect()
        .await?;
    let mut files = Vec::new();
    let mut deletes = Vec::new();
    let mut equality = Vec::new();
    for entry in per_manifest.into_iter().flatten() {
        match entry {
            Entry::Data(f) => files.push(f),
            Entry::PositionDeletes(d) => deletes.push(d),
            Entry::EqualityDeletes(d) => equality.push(d),
        }
    }
    if !deletes.is_empty() || !equality.is_empty() {
        for file in &mut files {
            file.deletes = deletes
                .iter()
                .filter(|d| d.applies_to(file))
                .map(|d| d.file.clone())
                .collect();
            file.equality = equality
                .iter()
                .filter(|d| d.applies_to(file))
                .cloned()
                .collect();
        }
    }
    Ok(files)
}

/// The live entries of one batch of a manifest's entries.
fn manifest_entries(
    batch: &RecordBatch,
    manifest: &Manifest,
    resolve: &(dyn Fn(&str, &str) -> DfResult<Path> + Sync),
    refuse: &(dyn Fn(String) -> DataFusionError + Sync),
) -> DfResult<Vec<Entry>> {
    let name = &manifest.path;
    let missing = |what: &str| refuse(format!("its manifest {name} has no {what}"));
    let status = ints(batch.column_by_name("status"))?.ok_or_else(|| missing("status"))?;
    let sequence = ints(batch.column_by_name("sequence_number"))?;
    let data_file = batch
        .column_by_name("data_file")
        .ok_or_else(|| missing("data_file"))?
        .as_struct();
    let path = strings(
        data_file
            .column_by_name("file_path")
            .ok_or_else(|| missing("file_path"))?,
    )?;
    let format = strings(
        data_file
            .column_by_name("file_format")
            .ok_or_else(|| missing("file_format"))?,
    )?;
    let size = ints(data_file.column_by_name("file_size_in_bytes"))?
        .ok_or_else(|| missing("file_size_in_bytes"))?;
    let records = ints(data_file.column_by_name("record_count"))?;
    let content = ints(data_file.column_by_name("content"))?;
    let referenced = data_file
        .column_by_name("referenced_data_file")
        .map(|a| strings(a))
        .transpose()?;
    let equality_ids = data_file
        .column_by_name("equality_ids")
        .and_then(|c| c.as_list_opt::<i32>());
    // Rendered partition values: equality deletes apply within their partition.
    let partition = data_file
        .column_by_name("partition")
        .filter(|p| p.as_struct_opt().is_some_and(|s| s.num_columns() > 0));
    let partition_key = |row: usize| {
        partition.and_then(|p| datafusion::arrow::util::display::array_value_to_string(p, row).ok())
    };
    let lower = IdMaps::new(data_file, "lower_bounds", &DataType::Binary)?;
    let upper = IdMaps::new(data_file, "upper_bounds", &DataType::Binary)?;
    let nulls = IdMaps::new(data_file, "null_value_counts", &DataType::Int64)?;
    let path_bound = |maps: &Option<IdMaps>, row: usize| {
        let maps = maps.as_ref()?;
        let values = maps.values.as_binary::<i32>();
        maps.row(row)
            .find(|(id, _)| *id == FILE_PATH_FIELD_ID)
            .map(|(_, i)| values.value(i).to_vec())
    };
    let mut out = Vec::new();
    for i in 0..batch.num_rows() {
        // 2: deleted from the table by this snapshot.
        if status.value(i) == 2 {
            continue;
        }
        let file = path.value(i);
        if !format.value(i).eq_ignore_ascii_case("parquet") {
            return Err(refuse(format!(
                "{} file {file} is {}; lambdafusion reads Parquet files only",
                if manifest.content == 0 {
                    "data"
                } else {
                    "delete"
                },
                format.value(i)
            )));
        }
        // Added entries without a sequence number inherit their manifest's.
        let entry_sequence = sequence
            .as_ref()
            .filter(|s| s.is_valid(i))
            .map_or(manifest.sequence, |s| s.value(i));
        let kind = content
            .as_ref()
            .filter(|c| c.is_valid(i))
            .map_or(0, |c| c.value(i));
        let size = size.value(i).max(0) as u64;
        if manifest.content == 1 && size > MAX_DELETE_FILE_BYTES {
            return Err(refuse(format!(
                "delete file {file} is {size} bytes, more than the {MAX_DELETE_FILE_BYTES} a \
                 task reads whole; compact the table's deletes (rewrite_position_delete_files, \
                 rewrite_data_files)"
            )));
        }
        match (manifest.content, kind) {
            (0, 0) => out.push(Entry::Data(DataFile {
                path: resolve(file, "a data file")?,
                name: file.to_string(),
                size,
                records: records
                    .as_ref()
                    .filter(|r| r.is_valid(i))
                    .map(|r| r.value(i).max(0) as u64),
                sequence: entry_sequence,
                deletes: Vec::new(),
                equality: Vec::new(),
                partition: (manifest.spec_id, partition_key(i)),
                metrics: Metrics {
                    lower: lower.as_ref().map(|m| m.bounds(i)).unwrap_or_default(),
                    upper: upper.as_ref().map(|m| m.bounds(i)).unwrap_or_default(),
                    nulls: nulls.as_ref().map(|m| m.counts(i)).unwrap_or_default(),
                },
            })),
            (1, 1) => out.push(Entry::PositionDeletes(PositionDeletes {
                file: DeleteFile {
                    path: resolve(file, "a delete file")?.to_string(),
                    size,
                },
                sequence: entry_sequence,
                referenced: referenced
                    .as_ref()
                    .filter(|r| r.is_valid(i))
                    .map(|r| r.value(i).to_string()),
                bounds: path_bound(&lower, i).zip(path_bound(&upper, i)),
            })),
            (1, 2) => {
                let ids = equality_ids
                    .as_ref()
                    .filter(|l| l.is_valid(i))
                    .map(|l| ints(Some(&l.value(i))))
                    .transpose()?
                    .flatten()
                    .map(|ids| ids.iter().flatten().map(|id| id as i32).collect::<Vec<_>>())
                    .unwrap_or_default();
                if ids.is_empty() {
                    return Err(refuse(format!(
                        "equality delete file {file} names no equality_ids"
                    )));
                }
                out.push(Entry::EqualityDeletes(EqualityDelete {
                    file: DeleteFile {
                        path: resolve(file, "a delete file")?.to_string(),
                        size,
                    },
                    sequence: entry_sequence,
                    field_ids: ids,
                    partition: (manifest.spec_id, partition_key(i)),
                }))
            }
            (m, k) => {
                return Err(refuse(format!(
                    "its manifest {name} (content {m}) lists {file} with content {k}, \
                     which the Iceberg spec does not allow"
                )))
            }
        }
    }
    Ok(out)
}

/// A manifest column that maps field ids to values (`lower_bounds`, `upper_bounds`,
/// `null_value_counts`: an Avro map, read as a list of key-value records), its keys and
/// values cast once for the whole batch.
struct IdMaps {
    column: Arc<dyn Array>,
    offsets: Vec<i64>,
    keys: Int64Array,
    values: Arc<dyn Array>,
}

impl IdMaps {
    /// The batch's `name` column, its values as `value_type`; `None` if it has none.
    fn new(data_file: &StructArray, name: &str, value_type: &DataType) -> DfResult<Option<Self>> {
        let Some(column) = data_file.column_by_name(name) else {
            return Ok(None);
        };
        let (offsets, entries): (Vec<i64>, &dyn Array) =
            if let Some(list) = column.as_list_opt::<i32>() {
                (
                    list.offsets().iter().map(|&o| o as i64).collect(),
                    list.values().as_ref(),
                )
            } else if let Some(map) = column.as_map_opt() {
                (
                    map.offsets().iter().map(|&o| o as i64).collect(),
                    map.entries(),
                )
            } else {
                return Ok(None);
            };
        let Some(entries) = entries.as_struct_opt() else {
            return Ok(None);
        };
        let (Some(keys), Some(values)) = (
            ints(entries.column_by_name("key"))?,
            entries.column_by_name("value"),
        ) else {
            return Ok(None);
        };
        Ok(Some(Self {
            column: column.clone(),
            offsets,
            keys,
            values: datafusion::arrow::compute::cast(values, value_type)?,
        }))
    }

    /// The entries of row `row`: (field id, index into the values).
    fn row(&self, row: usize) -> impl Iterator<Item = (i32, usize)> + '_ {
        let range = if self.column.is_null(row) {
            0..0
        } else {
            self.offsets[row] as usize..self.offsets[row + 1] as usize
        };
        range
            .filter(|&i| self.keys.is_valid(i) && self.values.is_valid(i))
            .map(|i| (self.keys.value(i) as i32, i))
    }

    /// Row `row` of a bounds map, as field id -> bytes.
    fn bounds(&self, row: usize) -> HashMap<i32, Vec<u8>> {
        let values = self.values.as_binary::<i32>();
        self.row(row)
            .map(|(id, i)| (id, values.value(i).to_vec()))
            .collect()
    }

    /// Row `row` of a counts map, as field id -> count.
    fn counts(&self, row: usize) -> HashMap<i32, u64> {
        let values = self
            .values
            .as_primitive::<datafusion::arrow::datatypes::Int64Type>();
        self.row(row)
            .map(|(id, i)| (id, values.value(i).max(0) as u64))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn records_of_no_fields_are_dropped_from_the_reader_schema() {
        let mut schema = json!({"type": "record", "name": "manifest_entry", "fields": [
            {"name": "status", "type": "int"},
            {"name": "data_file", "type": {"type": "record", "name": "r2", "fields": [
                {"name": "file_path", "type": "string"},
                {"name": "partition", "type": {"type": "record", "name": "r102", "fields": []}},
                {"name": "bounds", "type": ["null", {"type": "array", "items": {"type": "record",
                    "name": "k", "fields": [{"name": "e", "type": {"type": "record",
                    "name": "nothing", "fields": []}}]}}]}]}}]});
        assert!(drop_empty_records(&mut schema));
        let text = schema.to_string();
        assert!(
            !text.contains("\"partition\"") && !text.contains("\"e\""),
            "{text}"
        );
        assert!(
            text.contains("file_path") && text.contains("bounds"),
            "{text}"
        );
        assert!(!drop_empty_records(&mut schema), "nothing left to drop");
    }

    #[test]
    fn deletes_apply_by_sequence_number_partition_and_named_file() {
        let data = |name: &str, sequence| DataFile {
            path: Path::from(name),
            name: name.to_string(),
            size: 1,
            records: Some(10),
            sequence,
            deletes: Vec::new(),
            equality: Vec::new(),
            partition: (0, None),
            metrics: Metrics::default(),
        };
        let deletes =
            |sequence, referenced: Option<&str>, bounds: Option<(&str, &str)>| PositionDeletes {
                file: DeleteFile {
                    path: "d".into(),
                    size: 1,
                },
                sequence,
                referenced: referenced.map(String::from),
                bounds: bounds.map(|(l, u)| (l.as_bytes().to_vec(), u.as_bytes().to_vec())),
            };
        // A delete file applies to data files of its sequence number or older only.
        assert!(deletes(3, None, None).applies_to(&data("s3://b/t/a", 3)));
        assert!(deletes(3, None, None).applies_to(&data("s3://b/t/a", 1)));
        assert!(!deletes(2, None, None).applies_to(&data("s3://b/t/a", 3)));
        // referenced_data_file names the one file.
        assert!(deletes(3, Some("s3://b/t/a"), None).applies_to(&data("s3://b/t/a", 1)));
        assert!(!deletes(3, Some("s3://b/t/a"), None).applies_to(&data("s3://b/t/b", 1)));
        // file_path bounds, inclusive at both ends.
        let ranged = deletes(3, None, Some(("s3://b/t/b", "s3://b/t/d")));
        assert!(ranged.applies_to(&data("s3://b/t/b", 1)));
        assert!(ranged.applies_to(&data("s3://b/t/c", 1)));
        assert!(ranged.applies_to(&data("s3://b/t/d", 1)));
        assert!(!ranged.applies_to(&data("s3://b/t/a", 1)));
        assert!(!ranged.applies_to(&data("s3://b/t/e", 1)));
        // Equality deletes: strictly newer than the data, and within their partition
        // unless their spec has none.
        let equality = |sequence, partition: Option<&str>| EqualityDelete {
            file: DeleteFile {
                path: "e".into(),
                size: 1,
            },
            sequence,
            field_ids: vec![1],
            partition: (0, partition.map(String::from)),
        };
        let mut in_eu = data("s3://b/t/a", 2);
        in_eu.partition = (0, Some("{region: eu}".into()));
        assert!(equality(3, Some("{region: eu}")).applies_to(&in_eu));
        assert!(!equality(2, Some("{region: eu}")).applies_to(&in_eu));
        assert!(!equality(3, Some("{region: us}")).applies_to(&in_eu));
        assert!(equality(3, None).applies_to(&in_eu));
        let mut other_spec = in_eu.clone();
        other_spec.partition.0 = 1;
        assert!(!equality(3, Some("{region: eu}")).applies_to(&other_spec));
    }
}
