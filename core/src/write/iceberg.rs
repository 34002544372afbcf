//! Writes to Apache Iceberg tables: `CREATE TABLE t WITH (format = 'ICEBERG') AS query`
//! makes a new table (format version 2), `INSERT INTO t query` appends to one this engine
//! made. The tasks write Parquet files under the table's `data/` directory as any write
//! does ([`super::sink`]) — every column in every file, each carrying its Iceberg field
//! id — and the commit makes one snapshot listing them all: a manifest (Avro) of the new
//! files, a manifest list (the parent snapshot's manifests and the new one), and the
//! table's next metadata file, `metadata/v<N>.metadata.json`, written only if absent
//! (S3's conditional `PUT`, `If-None-Match: *`). That one write is the commit: the
//! table's readers (this engine's, and any that find the newest `v<N>`, as Hadoop-catalog
//! readers do; `version-hint.text` follows it as a hint) see all of a write or none.
//!
//! - **Exactly once.** A commit may run again (a scheduler crashed after it, or its
//!   request failed after it applied). A new table carries its job in its properties,
//!   every appended snapshot in its summary (`lambdafusion.query`): a commit that finds
//!   its job there has nothing to do.
//! - **Concurrent appends.** An append that finds `v<N>` taken (another writer committed
//!   first) starts again from the newest metadata: appends commute. If the table's
//!   columns (names, types, field ids) or partitioning changed meanwhile, the append
//!   fails with a conflict instead, and its files are deleted.
//! - **What is written.** Iceberg's own types (microsecond timestamps, `int` for the
//!   narrower integers, ...); identity partitions of string, integer, date or boolean
//!   columns; per file its rows, size, value and NULL counts, and the bounds
//!   [`super::stats`] knows exactly (integers, dates, short strings).
//!
//! Only tables whose metadata files are `v<N>.metadata.json` are appended to: those this
//! engine made (or Hadoop-catalog tables). A table another catalog keeps (Glue, a REST
//! or SQL catalog: metadata files named `<N>-<uuid>.metadata.json`, the pointer kept
//! elsewhere) is refused by name — appending beside its catalog would fork it.

use std::collections::BTreeMap;
use std::sync::Arc;

use apache_avro::types::Value as Avro;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::common::DFSchema;
use datafusion::parquet::arrow::PARQUET_FIELD_ID_META_KEY;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use serde_json::{json, Value};

use super::{store_of, WriteTarget, WrittenFile};
use crate::{Error, Result, Services};

/// The table property (and snapshot summary entry) naming the query that wrote it.
pub const CREATED_BY: &str = "lambdafusion.query";

/// Most times an append starts again after other writers' commits took its version.
const MAX_REBASES: usize = 50;

/// The first field id of a partition field (the spec's convention).
const FIRST_PARTITION_FIELD_ID: i64 = 1000;

// ---- types ---------------------------------------------------------------------------

/// The type a column is written as in an Iceberg table: Iceberg's own types, so that
/// every reader reads the files as the metadata declares them.
pub fn iceberg_arrow_type(data_type: &DataType) -> DataType {
    match data_type {
        DataType::Int8 | DataType::Int16 | DataType::UInt8 | DataType::UInt16 => DataType::Int32,
        DataType::UInt32 | DataType::UInt64 => DataType::Int64,
        DataType::Float16 => DataType::Float32,
        DataType::Timestamp(_, tz) => {
            DataType::Timestamp(TimeUnit::Microsecond, tz.as_ref().map(|_| Arc::from("UTC")))
        }
        DataType::Time32(_) | DataType::Time64(_) => DataType::Time64(TimeUnit::Microsecond),
        DataType::Date64 => DataType::Date32,
        DataType::LargeUtf8 | DataType::Utf8View => DataType::Utf8,
        DataType::LargeBinary | DataType::BinaryView => DataType::Binary,
        DataType::Dictionary(_, value) => iceberg_arrow_type(value),
        other => other.clone(),
    }
}

/// The Iceberg type (as the metadata spells it) of a column of `data_type`, one of
/// [`iceberg_arrow_type`]'s; `None` for types this engine does not write to Iceberg.
fn iceberg_type(data_type: &DataType) -> Option<String> {
    Some(match data_type {
        DataType::Boolean => "boolean".into(),
        DataType::Int32 => "int".into(),
        DataType::Int64 => "long".into(),
        DataType::Float32 => "float".into(),
        DataType::Float64 => "double".into(),
        DataType::Decimal128(p, s) if *s >= 0 => format!("decimal({p}, {s})"),
        DataType::Date32 => "date".into(),
        DataType::Time64(TimeUnit::Microsecond) => "time".into(),
        DataType::Timestamp(TimeUnit::Microsecond, None) => "timestamp".into(),
        DataType::Timestamp(TimeUnit::Microsecond, Some(_)) => "timestamptz".into(),
        DataType::Utf8 => "string".into(),
        DataType::Binary => "binary".into(),
        DataType::FixedSizeBinary(n) => format!("fixed[{n}]"),
        _ => return None,
    })
}

/// The Avro type of a partition value of a column of `data_type`.
fn partition_avro_type(data_type: &DataType) -> Option<Value> {
    Some(match data_type {
        DataType::Utf8 => json!("string"),
        DataType::Int32 => json!("int"),
        DataType::Int64 => json!("long"),
        DataType::Boolean => json!("boolean"),
        DataType::Date32 => json!({"type": "int", "logicalType": "date"}),
        _ => return None,
    })
}

/// The columns of a new Iceberg table of `columns` partitioned by `partition_by`, each
/// with its field id (`1..`, in the Parquet writer's field metadata): refused (naming
/// the column) when a column has a type this engine does not write to Iceberg, or a
/// partition column one it does not write as a partition value.
pub fn table_schema(columns: &DFSchema, partition_by: &[String]) -> Result<SchemaRef> {
    let fields = columns
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let data_type = iceberg_arrow_type(f.data_type());
            if iceberg_type(&data_type).is_none() {
                return Err(Error::InvalidInput(format!(
                    "column {} is {}, which lambdafusion does not write to Iceberg tables \
                     (it writes booleans, integers, floats, decimals, dates, times, \
                     timestamps, strings and binary): cast it, or leave it out",
                    f.name(),
                    f.data_type()
                )));
            }
            Ok(with_field_id(
                Field::new(f.name(), data_type, true),
                i as i64 + 1,
            ))
        })
        .collect::<Result<Vec<_>>>()?;
    let schema = Schema::new(fields);
    for name in partition_by {
        let field = schema.field_with_name(name)?;
        if partition_avro_type(field.data_type()).is_none() {
            return Err(Error::InvalidInput(format!(
                "Iceberg partition column {name} is {}: partition an Iceberg table by a \
                 string, an integer, a date or a boolean (cast it, or derive one such as a \
                 month)",
                field.data_type()
            )));
        }
    }
    Ok(Arc::new(schema))
}

fn with_field_id(field: Field, id: i64) -> Field {
    field.with_metadata([(PARQUET_FIELD_ID_META_KEY.to_string(), id.to_string())].into())
}

/// A column's field id (from its Parquet writer metadata).
fn field_id(field: &Field) -> Result<i64> {
    field
        .metadata()
        .get(PARQUET_FIELD_ID_META_KEY)
        .and_then(|id| id.parse().ok())
        .ok_or_else(|| Error::Internal(format!("column {} has no Iceberg field id", field.name())))
}

/// The metadata's `schema` of `schema` (with its field ids).
fn schema_json(schema: &Schema, schema_id: i64) -> Result<Value> {
    let fields = schema
        .fields()
        .iter()
        .map(|f| {
            Ok(json!({
                "id": field_id(f)?,
                "name": f.name(),
                "required": false,
                "type": iceberg_type(f.data_type()).ok_or_else(|| Error::Internal(format!(
                    "column {} has no Iceberg type", f.name())))?,
            }))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(json!({"type": "struct", "schema-id": schema_id, "fields": fields}))
}

/// The partition spec's fields (identity transforms) of `partition_by`.
fn spec_fields(layout: &Layout) -> Result<Vec<Value>> {
    layout
        .partition_by
        .iter()
        .zip(&layout.partition_fields)
        .map(|(column, (id, name))| {
            let field = layout.schema.field_with_name(column)?;
            Ok(json!({
                "name": name,
                "transform": "identity",
                "source-id": field_id(field)?,
                "field-id": id,
            }))
        })
        .collect()
}

/// `name` as an Avro name (`[A-Za-z_][A-Za-z0-9_]*`), as Iceberg's Java writer makes
/// one (`AvroSchemaUtil.makeCompatibleName`): another character is `_x` and its code
/// in hex, a leading digit gets a `_` before it. Readers find the field by its id.
fn avro_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for (i, c) in name.chars().enumerate() {
        match c {
            'A'..='Z' | 'a'..='z' | '_' => out.push(c),
            '0'..='9' if i > 0 => out.push(c),
            '0'..='9' => {
                out.push('_');
                out.push(c);
            }
            other => out.push_str(&format!("_x{:X}", other as u32)),
        }
    }
    out
}

// ---- planning an append ---------------------------------------------------------------

/// What an `INSERT INTO` an Iceberg table needs of it, read from its newest metadata:
/// its columns with their field ids (what its files must carry) and its identity
/// partition columns. Refused, naming why, unless it is a table this engine appends to.
pub async fn append_layout(
    services: &Services,
    name: &str,
    location: &str,
) -> Result<(SchemaRef, Vec<String>)> {
    let location = super::target::directory_url(location, super::WriteFormat::Iceberg)?;
    let (store, root) = store_of(services, &location)?;
    let refuse = |why: String| Error::InvalidInput(format!("INSERT INTO {name}: {why}"));
    let names = metadata_names(store.as_ref(), &root).await?;
    let Some((_, _, metadata)) = newest_of(store.as_ref(), &root, &names).await? else {
        return Err(refuse(format!(
            "no metadata/v<N>.metadata.json at {location}: lambdafusion appends to Iceberg \
             tables whose metadata files it numbers itself (tables it created, or \
             Hadoop-catalog tables); a table another catalog keeps (Glue, REST, SQL) is \
             written through that catalog"
        )));
    };
    // A metadata file not named `v<N>.metadata.json`: another catalog's.
    if let Some(other) = names
        .iter()
        .find(|n| n.ends_with(".metadata.json") && version_of(n).is_none())
    {
        return Err(refuse(format!(
            "its metadata file {other} is named by another catalog's convention: \
             lambdafusion appends only to Iceberg tables whose metadata files are \
             v<N>.metadata.json (tables it created), so that it never forks a table another \
             catalog keeps"
        )));
    }
    let layout = Layout::of(&metadata).map_err(refuse)?;
    Ok((layout.schema, layout.partition_by))
}

/// The version of a metadata file named `v<N>.metadata.json`.
fn version_of(name: &str) -> Option<u64> {
    name.strip_suffix(".metadata.json")?
        .strip_prefix('v')?
        .parse()
        .ok()
}

/// The columns and partitioning of a table's current metadata.
struct Layout {
    schema: SchemaRef,
    /// The schema's id in the metadata.
    schema_id: i64,
    /// The partition spec's fields (identity, in `partition_by`'s order): each one's
    /// field id and name, as the spec says them.
    partition_fields: Vec<(i64, String)>,
    partition_by: Vec<String>,
    spec_id: i64,
}

impl Layout {
    /// Reads them, refusing (with the reason) what an append cannot write: another
    /// format version, a column of a type not written, a partition other than identity.
    fn of(metadata: &Value) -> std::result::Result<Layout, String> {
        if metadata["format-version"].as_i64() != Some(2) {
            return Err(format!(
                "the table is Iceberg format version {}; lambdafusion appends to version 2",
                metadata["format-version"]
            ));
        }
        let schema_id = metadata["current-schema-id"].as_i64().unwrap_or(0);
        let schema = metadata["schemas"]
            .as_array()
            .and_then(|s| {
                s.iter()
                    .find(|s| s["schema-id"].as_i64().unwrap_or(0) == schema_id)
            })
            .ok_or("its metadata has no current schema")?;
        let mut fields = Vec::new();
        let mut names = BTreeMap::new();
        for f in schema["fields"]
            .as_array()
            .ok_or("its schema has no fields")?
        {
            let name = f["name"].as_str().ok_or("a column without a name")?;
            let id = f["id"].as_i64().ok_or("a column without a field id")?;
            let data_type = crate::iceberg::arrow_type(&f["type"], 0)
                .ok()
                .filter(|t| iceberg_type(t).is_some())
                .ok_or_else(|| {
                    format!(
                        "column {name} is {}, which lambdafusion does not append to",
                        f["type"]
                    )
                })?;
            if f["required"].as_bool() == Some(true) {
                return Err(format!(
                    "column {name} is required (NOT NULL), which lambdafusion does not \
                     check on append"
                ));
            }
            names.insert(id, name.to_string());
            fields.push(with_field_id(Field::new(name, data_type, true), id));
        }
        let spec_id = metadata["default-spec-id"].as_i64().unwrap_or(0);
        let spec = metadata["partition-specs"]
            .as_array()
            .and_then(|s| s.iter().find(|s| s["spec-id"].as_i64() == Some(spec_id)))
            .ok_or("its metadata has no default partition spec")?;
        let mut partition_by = Vec::new();
        let mut partition_fields = Vec::new();
        for p in spec["fields"].as_array().into_iter().flatten() {
            let source = p["source-id"].as_i64().and_then(|id| names.get(&id));
            let field = p["field-id"].as_i64().zip(p["name"].as_str());
            match (p["transform"].as_str(), source, field) {
                (Some("identity"), Some(name), Some((id, field_name))) => {
                    partition_by.push(name.clone());
                    partition_fields.push((id, field_name.to_string()));
                }
                _ => {
                    return Err(format!(
                        "it is partitioned by {} of {}, and lambdafusion appends to tables \
                         partitioned by columns' values (identity) only",
                        p["transform"], p["source-id"]
                    ))
                }
            }
        }
        Ok(Layout {
            schema: Arc::new(Schema::new(fields)),
            schema_id,
            partition_fields,
            partition_by,
            spec_id,
        })
    }
}

// ---- the metadata files ------------------------------------------------------------

/// The newest `metadata/v<N>.metadata.json` of the table at `root`: its version, name
/// and contents; `None` when it has none.
async fn newest(store: &dyn ObjectStore, root: &Path) -> Result<Option<(u64, String, Value)>> {
    let names = metadata_names(store, root).await?;
    newest_of(store, root, &names).await
}

/// The names of the files under the table's `metadata/`.
async fn metadata_names(store: &dyn ObjectStore, root: &Path) -> Result<Vec<String>> {
    use futures::TryStreamExt;
    let dir = root.clone().join("metadata");
    let listed: Vec<_> = store.list(Some(&dir)).try_collect().await?;
    Ok(listed
        .into_iter()
        .filter_map(|m| m.location.filename().map(str::to_string))
        .collect())
}

/// [`newest`], from the names a listing of `metadata/` found.
async fn newest_of(
    store: &dyn ObjectStore,
    root: &Path,
    names: &[String],
) -> Result<Option<(u64, String, Value)>> {
    let Some(mut version) = names.iter().filter_map(|n| version_of(n)).max() else {
        return Ok(None);
    };
    let mut metadata = read_version(store, root, version)
        .await?
        .ok_or_else(|| Error::Internal(format!("metadata version {version} vanished")))?;
    // Newer versions may have been committed since the listing: follow them.
    while let Some(next) = read_version(store, root, version + 1).await? {
        version += 1;
        metadata = next;
    }
    Ok(Some((version, metadata_name(version), metadata)))
}

fn metadata_name(version: u64) -> String {
    format!("v{version}.metadata.json")
}

async fn read_version(store: &dyn ObjectStore, root: &Path, version: u64) -> Result<Option<Value>> {
    let path = root.clone().join("metadata").join(metadata_name(version));
    match store.get(&path).await {
        Ok(got) => {
            let bytes = got.bytes().await?;
            serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| Error::Internal(format!("Iceberg metadata {path} is not JSON: {e}")))
        }
        Err(object_store::Error::NotFound { .. }) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Writes `metadata` as version `version`, only if no writer has: false if one had.
async fn put_version(
    store: &dyn ObjectStore,
    root: &Path,
    version: u64,
    metadata: &Value,
) -> Result<bool> {
    let path = root.clone().join("metadata").join(metadata_name(version));
    let body = serde_json::to_vec_pretty(metadata).map_err(|e| Error::Internal(e.to_string()))?;
    match store
        .put_opts(
            &path,
            PutPayload::from(body),
            PutOptions::from(PutMode::Create),
        )
        .await
    {
        Ok(_) => Ok(true),
        Err(object_store::Error::AlreadyExists { .. }) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Points `version-hint.text` at `version`, for readers that start from it. Best effort:
/// the metadata file is the commit, and readers (this engine's too) look past the hint.
async fn hint(store: &dyn ObjectStore, root: &Path, version: u64) {
    let path = root.clone().join("metadata").join("version-hint.text");
    if let Err(e) = store
        .put(&path, PutPayload::from(version.to_string().into_bytes()))
        .await
    {
        tracing::warn!(error = %e, %path, "could not update the Iceberg version hint");
    }
}

/// Whether `metadata` is of a table `job` created (its properties name it).
fn created_by(metadata: &Value, job: &str) -> bool {
    metadata["properties"][CREATED_BY].as_str() == Some(job)
}

/// Whether `metadata` holds the snapshot `id` (this commit run's own: ids are random).
fn holds_snapshot(metadata: &Value, id: i64) -> bool {
    metadata["snapshots"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|s| s["snapshot-id"].as_i64() == Some(id))
}

/// Whether `metadata` holds a snapshot of `job` (or was created by it, with none).
fn has_job(metadata: &Value, job: &str) -> bool {
    metadata["snapshots"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|s| s["summary"][CREATED_BY].as_str() == Some(job))
}

// ---- the Avro files ----------------------------------------------------------------

/// `t`, or NULL: an optional field's Avro type.
fn optional(t: Value) -> Value {
    json!(["null", t])
}

/// An Avro record field of Iceberg field id `id`.
fn avro_field(name: &str, id: i64, t: Value, required: bool) -> Value {
    if required {
        json!({"name": name, "type": t, "field-id": id})
    } else {
        json!({"name": name, "type": optional(t), "default": null, "field-id": id})
    }
}

/// An Iceberg map with int keys as Avro writes it: an array of key-value records.
fn int_map(key_id: i64, value_id: i64, value: &str) -> Value {
    json!({
        "type": "array",
        "logicalType": "map",
        "items": {
            "type": "record",
            "name": format!("k{key_id}_v{value_id}"),
            "fields": [
                {"name": "key", "type": "int", "field-id": key_id},
                {"name": "value", "type": value, "field-id": value_id},
            ],
        },
    })
}

/// The Avro schema of a v2 manifest's entries whose partition struct has `partition`'s
/// fields (Avro field records).
fn manifest_entry_schema(partition: Vec<Value>) -> Value {
    let data_file = json!({
        "type": "record",
        "name": "r2",
        "fields": [
            avro_field("content", 134, json!("int"), true),
            avro_field("file_path", 100, json!("string"), true),
            avro_field("file_format", 101, json!("string"), true),
            avro_field("partition", 102, json!({"type": "record", "name": "r102", "fields": partition}), true),
            avro_field("record_count", 103, json!("long"), true),
            avro_field("file_size_in_bytes", 104, json!("long"), true),
            avro_field("column_sizes", 108, int_map(117, 118, "long"), false),
            avro_field("value_counts", 109, int_map(119, 120, "long"), false),
            avro_field("null_value_counts", 110, int_map(121, 122, "long"), false),
            avro_field("nan_value_counts", 137, int_map(138, 139, "long"), false),
            avro_field("lower_bounds", 125, int_map(126, 127, "bytes"), false),
            avro_field("upper_bounds", 128, int_map(129, 130, "bytes"), false),
            avro_field("key_metadata", 131, json!("bytes"), false),
            avro_field("split_offsets", 132, json!({"type": "array", "items": "long", "element-id": 133}), false),
            avro_field("equality_ids", 135, json!({"type": "array", "items": "int", "element-id": 136}), false),
            avro_field("sort_order_id", 140, json!("int"), false),
        ],
    });
    json!({
        "type": "record",
        "name": "manifest_entry",
        "fields": [
            avro_field("status", 0, json!("int"), true),
            avro_field("snapshot_id", 1, json!("long"), false),
            avro_field("sequence_number", 3, json!("long"), false),
            avro_field("file_sequence_number", 4, json!("long"), false),
            avro_field("data_file", 2, data_file, true),
        ],
    })
}

/// The Avro schema of a v2 manifest list's entries.
fn manifest_file_schema() -> Value {
    let summary = json!({
        "type": "record",
        "name": "r508",
        "fields": [
            avro_field("contains_null", 509, json!("boolean"), true),
            avro_field("contains_nan", 518, json!("boolean"), false),
            avro_field("lower_bound", 510, json!("bytes"), false),
            avro_field("upper_bound", 511, json!("bytes"), false),
        ],
    });
    json!({
        "type": "record",
        "name": "manifest_file",
        "fields": [
            avro_field("manifest_path", 500, json!("string"), true),
            avro_field("manifest_length", 501, json!("long"), true),
            avro_field("partition_spec_id", 502, json!("int"), true),
            avro_field("content", 517, json!("int"), true),
            avro_field("sequence_number", 515, json!("long"), true),
            avro_field("min_sequence_number", 516, json!("long"), true),
            avro_field("added_snapshot_id", 503, json!("long"), true),
            avro_field("added_files_count", 504, json!("int"), true),
            avro_field("existing_files_count", 505, json!("int"), true),
            avro_field("deleted_files_count", 506, json!("int"), true),
            avro_field("added_rows_count", 512, json!("long"), true),
            avro_field("existing_rows_count", 513, json!("long"), true),
            avro_field("deleted_rows_count", 514, json!("long"), true),
            avro_field("partitions", 507, json!({"type": "array", "items": summary, "element-id": 508}), false),
            avro_field("key_metadata", 519, json!("bytes"), false),
        ],
    })
}

fn avro_error(e: apache_avro::Error) -> Error {
    Error::Internal(format!("writing Iceberg Avro metadata: {e}"))
}

/// An Avro object container file of `schema`, with `metadata` in its header, holding
/// `records`.
fn avro_file(schema: &Value, metadata: &[(&str, String)], records: Vec<Avro>) -> Result<Vec<u8>> {
    let schema = apache_avro::Schema::parse(schema).map_err(avro_error)?;
    let mut writer = apache_avro::Writer::new(&schema, Vec::new());
    for (key, value) in metadata {
        writer
            .add_user_metadata(key.to_string(), value.as_bytes())
            .map_err(avro_error)?;
    }
    for record in records {
        writer.append(record).map_err(avro_error)?;
    }
    writer.into_inner().map_err(avro_error)
}

fn some(value: Avro) -> Avro {
    Avro::Union(1, Box::new(value))
}

fn none() -> Avro {
    Avro::Union(0, Box::new(Avro::Null))
}

/// A partition value (the text the writing task recorded) as the typed value Iceberg
/// stores, and as its single-value binary form (for the manifest list's bounds).
fn partition_value(text: Option<&str>, data_type: &DataType) -> Result<Option<(Avro, Vec<u8>)>> {
    let Some(text) = text else {
        return Ok(None);
    };
    let bad = || Error::Internal(format!("partition value {text:?} is not a {data_type}"));
    Ok(Some(match data_type {
        DataType::Utf8 => (Avro::String(text.into()), text.as_bytes().to_vec()),
        DataType::Int32 => {
            let v: i32 = text.parse().map_err(|_| bad())?;
            (Avro::Int(v), v.to_le_bytes().to_vec())
        }
        DataType::Int64 => {
            let v: i64 = text.parse().map_err(|_| bad())?;
            (Avro::Long(v), v.to_le_bytes().to_vec())
        }
        DataType::Boolean => {
            let v: bool = text.parse().map_err(|_| bad())?;
            (Avro::Boolean(v), vec![u8::from(v)])
        }
        DataType::Date32 => {
            let v = days(text).ok_or_else(bad)?;
            (Avro::Date(v), v.to_le_bytes().to_vec())
        }
        _ => return Err(bad()),
    }))
}

/// Days since 1970-01-01 of a `YYYY-MM-DD` date.
fn days(text: &str) -> Option<i32> {
    use datafusion::arrow::compute::kernels::cast_utils::Parser;
    datafusion::arrow::datatypes::Date32Type::parse(text)
}

/// A statistics bound (a value of the `stats` JSON [`super::stats`] gathers) as Iceberg's
/// single-value binary form.
fn bound_bytes(value: &Value, data_type: &DataType) -> Option<Vec<u8>> {
    match data_type {
        DataType::Int32 => Some((value.as_i64()? as i32).to_le_bytes().to_vec()),
        DataType::Int64 => Some(value.as_i64()?.to_le_bytes().to_vec()),
        DataType::Date32 => Some(days(value.as_str()?)?.to_le_bytes().to_vec()),
        DataType::Utf8 => Some(value.as_str()?.as_bytes().to_vec()),
        _ => None,
    }
}

/// An int-keyed map (column field id -> value) as Avro records.
fn map_of(entries: Vec<(i64, Avro)>) -> Avro {
    some(Avro::Array(
        entries
            .into_iter()
            .map(|(k, v)| {
                Avro::Record(vec![
                    ("key".into(), Avro::Int(k as i32)),
                    ("value".into(), v),
                ])
            })
            .collect(),
    ))
}

/// The manifest entry of one written file.
fn manifest_entry(file: &WrittenFile, layout: &Layout, snapshot_id: i64) -> Result<Avro> {
    let schema = &layout.schema;
    let mut partition = Vec::new();
    for (name, (_, field_name)) in layout.partition_by.iter().zip(&layout.partition_fields) {
        let field = schema.field_with_name(name)?;
        let text = file
            .partition
            .as_ref()
            .and_then(|p| p.get(name).cloned().flatten());
        let value = partition_value(text.as_deref(), field.data_type())?;
        partition.push((
            avro_name(field_name),
            value.map_or_else(none, |(v, _)| some(v)),
        ));
    }
    let stats: Value = file
        .stats
        .as_deref()
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or(Value::Null);
    let (mut values, mut nulls, mut lower, mut upper) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for field in schema.fields() {
        let id = field_id(field)?;
        let name = field.name();
        if let Some(n) = stats["nullCount"][name].as_i64() {
            values.push((id, Avro::Long(file.rows as i64)));
            nulls.push((id, Avro::Long(n)));
        }
        let low = bound_bytes(&stats["minValues"][name], field.data_type());
        let high = bound_bytes(&stats["maxValues"][name], field.data_type());
        if let (Some(low), Some(high)) = (low, high) {
            lower.push((id, Avro::Bytes(low)));
            upper.push((id, Avro::Bytes(high)));
        }
    }
    let data_file = Avro::Record(vec![
        ("content".into(), Avro::Int(0)),
        ("file_path".into(), Avro::String(file.path.clone())),
        ("file_format".into(), Avro::String("PARQUET".into())),
        ("partition".into(), Avro::Record(partition)),
        ("record_count".into(), Avro::Long(file.rows as i64)),
        ("file_size_in_bytes".into(), Avro::Long(file.bytes as i64)),
        ("column_sizes".into(), none()),
        ("value_counts".into(), map_of(values)),
        ("null_value_counts".into(), map_of(nulls)),
        ("nan_value_counts".into(), none()),
        ("lower_bounds".into(), map_of(lower)),
        ("upper_bounds".into(), map_of(upper)),
        ("key_metadata".into(), none()),
        ("split_offsets".into(), none()),
        ("equality_ids".into(), none()),
        ("sort_order_id".into(), none()),
    ]);
    Ok(Avro::Record(vec![
        ("status".into(), Avro::Int(1)),
        ("snapshot_id".into(), some(Avro::Long(snapshot_id))),
        // Inherited from the manifest list: the snapshot's sequence number.
        ("sequence_number".into(), none()),
        ("file_sequence_number".into(), none()),
        ("data_file".into(), data_file),
    ]))
}

/// A manifest list entry's fields, by name.
type ListEntry = Vec<(String, Avro)>;

/// The manifest of `files` (an Avro file) and its manifest list entry, without the
/// sequence numbers (set per commit try: [`with_sequence`]).
fn manifest(
    layout: &Layout,
    files: &[WrittenFile],
    snapshot_id: i64,
) -> Result<(Vec<u8>, ListEntry)> {
    let schema = &layout.schema;
    let mut partition_fields = Vec::new();
    for (name, (id, field_name)) in layout.partition_by.iter().zip(&layout.partition_fields) {
        let field = schema.field_with_name(name)?;
        let t = partition_avro_type(field.data_type())
            .ok_or_else(|| Error::Internal(format!("partition column {name} has no Avro type")))?;
        partition_fields.push(avro_field(&avro_name(field_name), *id, t, false));
    }
    let entries = files
        .iter()
        .map(|f| manifest_entry(f, layout, snapshot_id))
        .collect::<Result<Vec<_>>>()?;
    let spec = spec_fields(layout)?;
    let body = avro_file(
        &manifest_entry_schema(partition_fields),
        &[
            ("schema", schema_json(schema, layout.schema_id)?.to_string()),
            ("schema-id", layout.schema_id.to_string()),
            ("partition-spec", Value::Array(spec).to_string()),
            ("partition-spec-id", layout.spec_id.to_string()),
            ("format-version", "2".into()),
            ("content", "data".into()),
        ],
        entries,
    )?;
    // The manifest list's summary of each partition field: NULLs, and the least and
    // greatest value (the files' values' byte forms compare as Iceberg orders them:
    // numbers by value, strings by their UTF-8 bytes).
    let mut summaries = Vec::new();
    for name in &layout.partition_by {
        let field = schema.field_with_name(name)?;
        let mut contains_null = false;
        let mut bounds: Option<(Avro, Vec<u8>, Avro, Vec<u8>)> = None;
        for file in files {
            let text = file
                .partition
                .as_ref()
                .and_then(|p| p.get(name).cloned().flatten());
            match partition_value(text.as_deref(), field.data_type())? {
                None => contains_null = true,
                Some((v, b)) => {
                    let key = order_key(&v);
                    bounds = Some(match bounds {
                        None => (v.clone(), b.clone(), v, b),
                        Some((lv, lb, hv, hb)) => {
                            let (lv, lb) = if key < order_key(&lv) {
                                (v.clone(), b.clone())
                            } else {
                                (lv, lb)
                            };
                            let (hv, hb) = if key > order_key(&hv) {
                                (v, b)
                            } else {
                                (hv, hb)
                            };
                            (lv, lb, hv, hb)
                        }
                    });
                }
            }
        }
        let (lower, upper) = match bounds {
            Some((_, lb, _, hb)) => (some(Avro::Bytes(lb)), some(Avro::Bytes(hb))),
            None => (none(), none()),
        };
        summaries.push(Avro::Record(vec![
            ("contains_null".into(), Avro::Boolean(contains_null)),
            ("contains_nan".into(), none()),
            ("lower_bound".into(), lower),
            ("upper_bound".into(), upper),
        ]));
    }
    let rows: i64 = files.iter().map(|f| f.rows as i64).sum();
    let entry = vec![
        ("manifest_path".into(), Avro::Null), // set by the caller, which names it
        ("manifest_length".into(), Avro::Long(body.len() as i64)),
        ("partition_spec_id".into(), Avro::Int(layout.spec_id as i32)),
        ("content".into(), Avro::Int(0)),
        ("sequence_number".into(), Avro::Long(0)),
        ("min_sequence_number".into(), Avro::Long(0)),
        ("added_snapshot_id".into(), Avro::Long(snapshot_id)),
        ("added_files_count".into(), Avro::Int(files.len() as i32)),
        ("existing_files_count".into(), Avro::Int(0)),
        ("deleted_files_count".into(), Avro::Int(0)),
        ("added_rows_count".into(), Avro::Long(rows)),
        ("existing_rows_count".into(), Avro::Long(0)),
        ("deleted_rows_count".into(), Avro::Long(0)),
        ("partitions".into(), some(Avro::Array(summaries))),
        ("key_metadata".into(), none()),
    ];
    Ok((body, entry))
}

/// A sortable form of a partition value (one column's values are all of one kind).
fn order_key(value: &Avro) -> (i64, Vec<u8>) {
    match value {
        Avro::Int(v) | Avro::Date(v) => (*v as i64, Vec::new()),
        Avro::Long(v) => (*v, Vec::new()),
        Avro::Boolean(v) => (*v as i64, Vec::new()),
        Avro::String(s) => (0, s.as_bytes().to_vec()),
        _ => (0, Vec::new()),
    }
}

/// The manifest list entry `entry` with its path and the snapshot's sequence number.
fn with_sequence(entry: &[(String, Avro)], path: &str, sequence: i64) -> Avro {
    Avro::Record(
        entry
            .iter()
            .map(|(k, v)| {
                let v = match k.as_str() {
                    "manifest_path" => Avro::String(path.to_string()),
                    "sequence_number" | "min_sequence_number" => Avro::Long(sequence),
                    _ => v.clone(),
                };
                (k.clone(), v)
            })
            .collect(),
    )
}

/// The entries of the manifest list at `url` (a snapshot's of the table at `location`),
/// to carry into the next. A list outside the table's directory is refused, as the
/// reader refuses it.
async fn manifest_list_entries(
    store: &dyn ObjectStore,
    location: &str,
    url: &str,
) -> Result<Vec<Avro>> {
    let root =
        url::Url::parse(location).map_err(|e| Error::Internal(format!("{location}: {e}")))?;
    let path = crate::iceberg::file_inside(&root, url, "the current snapshot's manifest list")?;
    let bytes = store.get(&path).await?.bytes().await?;
    let schema = apache_avro::Schema::parse(&manifest_file_schema()).map_err(avro_error)?;
    let reader = apache_avro::Reader::with_schema(&schema, &bytes[..]).map_err(|e| {
        Error::Internal(format!(
            "the Iceberg manifest list {url} is not readable: {e}"
        ))
    })?;
    reader
        .map(|r| r.map_err(|e| Error::Internal(format!("the Iceberg manifest list {url}: {e}"))))
        .collect()
}

/// The table's directory as the metadata names it and the files in it: the store's
/// `scheme://authority/` and the directory's object key, literally (ending in `/`).
fn literal_location(target: &WriteTarget, root: &Path) -> Result<String> {
    let url = url::Url::parse(&target.location)
        .map_err(|e| Error::Internal(format!("{}: {e}", target.location)))?;
    let key = root.as_ref();
    let key = if key.is_empty() {
        String::new()
    } else {
        format!("{key}/")
    };
    Ok(format!("{}://{}/{key}", url.scheme(), url.authority()))
}

// ---- the commit --------------------------------------------------------------------

/// A new snapshot id: positive, random.
fn snapshot_id() -> i64 {
    (uuid::Uuid::new_v4().as_u64_pair().0 >> 1) as i64
}

/// The summary of a snapshot appending `files` to a table whose current snapshot's
/// summary is `parent`.
fn summary(job: &str, files: &[WrittenFile], parent: Option<&Value>) -> Value {
    let added_files = files.len() as u64;
    let added_rows: u64 = files.iter().map(|f| f.rows).sum();
    let added_bytes: u64 = files.iter().map(|f| f.bytes).sum();
    let total = |key: &str, added: u64| -> Option<String> {
        match parent {
            None => Some(added.to_string()),
            Some(p) => p[key]
                .as_str()
                .and_then(|t| t.parse::<u64>().ok())
                .map(|t| (t + added).to_string()),
        }
    };
    let mut summary = json!({
        "operation": "append",
        CREATED_BY: job,
        "added-data-files": added_files.to_string(),
        "added-records": added_rows.to_string(),
        "added-files-size": added_bytes.to_string(),
    });
    for (key, added) in [
        ("total-data-files", added_files),
        ("total-records", added_rows),
        ("total-files-size", added_bytes),
        ("total-delete-files", 0),
        ("total-position-deletes", 0),
        ("total-equality-deletes", 0),
    ] {
        if let Some(t) = total(key, added) {
            summary[key] = Value::String(t);
        }
    }
    summary
}

/// Commits `files` to the Iceberg table of `target`: creates it (a `CREATE TABLE ...
/// AS`) or appends a snapshot to it (`INSERT INTO`). Returns the metadata version
/// committed, or the one an earlier run of this commit made.
pub async fn commit(
    services: &Services,
    target: &WriteTarget,
    files: &[WrittenFile],
) -> Result<u64> {
    let (store, root) = store_of(services, &target.location)?;
    let store = store.as_ref();
    let label = target.table.as_deref().unwrap_or("the table");
    let planned = crate::plan::decode_schema(&target.table_schema)?;
    // Every path the metadata names is literal: the object's key as written (a
    // partition directory `k=a%2Fb` is that text in the key, as Iceberg's writers make it).
    let base = literal_location(target, &root)?;
    let files = &files
        .iter()
        .map(|f| {
            let relative = f.path.strip_prefix(&target.location).ok_or_else(|| {
                Error::Internal(format!(
                    "written file {} is not under {}",
                    f.path, target.location
                ))
            })?;
            Ok(WrittenFile {
                path: format!("{base}{relative}"),
                ..f.clone()
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let snapshot = snapshot_id();
    // Named after this run alone: a run that loses deletes its own, and never another's.
    let run = uuid::Uuid::new_v4().simple().to_string();
    let manifest_name = format!("m-{}-{run}.avro", target.job_id);
    let manifest_url = file_url(&base, &manifest_name);
    let manifest_path = root.clone().join("metadata").join(manifest_name.as_str());
    let mut written: Vec<Path> = Vec::new();
    // A metadata write that failed may have applied (its answer lost): then the files
    // this run wrote may be named by a committed version, and are kept.
    let mut uncertain = false;

    let result = async {
        if !target.append {
            let layout = Layout {
                schema: planned.clone(),
                schema_id: 0,
                partition_fields: target
                    .partition_by
                    .iter()
                    .enumerate()
                    .map(|(i, name)| (FIRST_PARTITION_FIELD_ID + i as i64, name.clone()))
                    .collect(),
                partition_by: target.partition_by.clone(),
                spec_id: 0,
            };
            if let Some(metadata) = read_version(store, &root, 1).await? {
                return existing_creation(&metadata, target).map(|v| (v, false));
            }
            let now = crate::time::now_ms() as i64;
            let (body, entry) = manifest(&layout, files, snapshot)?;
            store.put(&manifest_path, PutPayload::from(body)).await?;
            written.push(manifest_path.clone());
            let list = vec![with_sequence(&entry, &manifest_url, 1)];
            let list_url = put_list(
                store,
                &root,
                &base,
                snapshot,
                None,
                1,
                list,
                &run,
                &mut written,
            )
            .await?;
            let metadata = new_table(
                &layout,
                &NewSnapshot {
                    target,
                    base: &base,
                    schema_id: layout.schema_id,
                    id: snapshot,
                    parent: None,
                    sequence: 1,
                    now,
                    list_url,
                    files,
                },
            )?;
            let put = put_version(store, &root, 1, &metadata).await;
            uncertain = put.is_err();
            if put? {
                hint(store, &root, 1).await;
                return Ok((1, true));
            }
            // Taken: by this run itself (its request was retried after it applied, and
            // the retry found the object), by an earlier run of this commit, or by another.
            let metadata = read_version(store, &root, 1).await?.unwrap_or(Value::Null);
            let mine = holds_snapshot(&metadata, snapshot);
            return existing_creation(&metadata, target).map(|v| (v, mine));
        }
        let mut manifest_entry: Option<ListEntry> = None;
        for _ in 0..MAX_REBASES {
            let Some((version, file, metadata)) = newest(store, &root).await? else {
                return Err(Error::Conflict(format!(
                    "{label} has no Iceberg metadata at {} any more: this INSERT's files \
                     are discarded",
                    target.location
                )));
            };
            if has_job(&metadata, &target.job_id) {
                // Committed by an earlier run of this commit, or by this run's own
                // request, retried after it applied (the retry found the object).
                return Ok((version, holds_snapshot(&metadata, snapshot)));
            }
            let layout = Layout::of(&metadata).map_err(|why| {
                Error::Conflict(format!("{label} changed while this INSERT ran: {why}"))
            })?;
            if !same_columns(&layout.schema, &planned) || layout.partition_by != target.partition_by
            {
                return Err(Error::Conflict(format!(
                    "{label}'s columns or partitioning changed (metadata version {version}) \
                     while this INSERT ran: its files are discarded; run it again"
                )));
            }
            let entry = match &manifest_entry {
                Some(e) => e.clone(),
                None => {
                    let (body, entry) = manifest(&layout, files, snapshot)?;
                    store.put(&manifest_path, PutPayload::from(body)).await?;
                    written.push(manifest_path.clone());
                    manifest_entry = Some(entry.clone());
                    entry
                }
            };
            let sequence = metadata["last-sequence-number"].as_i64().unwrap_or(0) + 1;
            let now = commit_time(&metadata);
            let parent = metadata["current-snapshot-id"]
                .as_i64()
                .filter(|id| *id >= 0);
            let parent_snapshot = parent.and_then(|id| {
                metadata["snapshots"]
                    .as_array()?
                    .iter()
                    .find(|s| s["snapshot-id"].as_i64() == Some(id))
                    .cloned()
            });
            if parent.is_some() && parent_snapshot.is_none() {
                return Err(Error::Conflict(format!(
                    "{label}'s metadata version {version} does not list its current snapshot: \
                     this INSERT's files are discarded"
                )));
            }
            let mut list = match parent_snapshot
                .as_ref()
                .and_then(|s| s["manifest-list"].as_str())
            {
                Some(url) => manifest_list_entries(store, &target.location, url).await?,
                None => Vec::new(),
            };
            list.push(with_sequence(&entry, &manifest_url, sequence));
            let list_path_count = written.len();
            let list_url = put_list(
                store,
                &root,
                &base,
                snapshot,
                parent,
                sequence,
                list,
                &run,
                &mut written,
            )
            .await?;
            let next = appended(
                &metadata,
                &file_url(&base, &file),
                &NewSnapshot {
                    target,
                    base: &base,
                    schema_id: layout.schema_id,
                    id: snapshot,
                    parent: parent.zip(parent_snapshot.as_ref().map(|s| &s["summary"])),
                    sequence,
                    now,
                    list_url,
                    files,
                },
            );
            let put = put_version(store, &root, version + 1, &next).await;
            uncertain = put.is_err();
            if put? {
                hint(store, &root, version + 1).await;
                return Ok((version + 1, true));
            }
            // Taken: by another writer (then this try's manifest list is no one's), or by
            // this try itself (a retried request), which the next turn finds.
            let taken = read_version(store, &root, version + 1).await?;
            if taken.is_some_and(|m| holds_snapshot(&m, snapshot)) {
                hint(store, &root, version + 1).await;
                return Ok((version + 1, true));
            }
            for path in written.drain(list_path_count..) {
                let _ = store.delete(&path).await;
            }
        }
        Err(Error::Conflict(format!(
            "{label} took {MAX_REBASES} other commits while this INSERT tried to commit: its \
             files are discarded; run it again"
        )))
    }
    .await;
    if !uncertain && !matches!(result, Ok((_, true))) {
        // This run committed nothing (it failed, or found the commit made by an earlier
        // run): no metadata version names the files it wrote.
        for path in written {
            let _ = store.delete(&path).await;
        }
    }
    result.map(|(version, _)| version)
}

/// The time of a commit on top of `metadata`: now, and never before what the metadata
/// records last (a clock behind another writer's would make metadata Iceberg's readers
/// refuse: `last-updated-ms` before its last log entry).
fn commit_time(metadata: &Value) -> i64 {
    let last = |key: &str| {
        metadata[key]
            .as_array()
            .and_then(|log| log.last())
            .and_then(|entry| entry["timestamp-ms"].as_i64())
            .unwrap_or(0)
    };
    (crate::time::now_ms() as i64)
        .max(metadata["last-updated-ms"].as_i64().unwrap_or(0))
        .max(last("snapshot-log"))
        .max(last("metadata-log"))
}

/// The URL of metadata file `name` of the table at `base` ([`literal_location`]).
fn file_url(base: &str, name: &str) -> String {
    format!("{base}metadata/{name}")
}

/// Writes a manifest list of `entries` for snapshot `snapshot`; returns its URL.
#[allow(clippy::too_many_arguments)]
async fn put_list(
    store: &dyn ObjectStore,
    root: &Path,
    base: &str,
    snapshot: i64,
    parent: Option<i64>,
    sequence: i64,
    entries: Vec<Avro>,
    run: &str,
    written: &mut Vec<Path>,
) -> Result<String> {
    let name = format!("snap-{snapshot}-{sequence}-{run}.avro");
    let body = avro_file(
        &manifest_file_schema(),
        &[
            ("snapshot-id", snapshot.to_string()),
            (
                "parent-snapshot-id",
                parent.map_or("null".into(), |p| p.to_string()),
            ),
            ("sequence-number", sequence.to_string()),
            ("format-version", "2".into()),
        ],
        entries,
    )?;
    let path = root.clone().join("metadata").join(name.as_str());
    store.put(&path, PutPayload::from(body)).await?;
    written.push(path);
    Ok(file_url(base, &name))
}

/// The answer of a creation that found version 1 written: this job's (the commit ran
/// before), or a conflict.
fn existing_creation(metadata: &Value, target: &WriteTarget) -> Result<u64> {
    if created_by(metadata, &target.job_id) {
        return Ok(1);
    }
    Err(Error::Conflict(format!(
        "an Iceberg table was created at {} meanwhile by another writer: {}'s files are \
         discarded",
        target.location,
        target.table.as_deref().unwrap_or("the table")
    )))
}

/// Whether two schemas have the same columns: names, types and field ids, in order.
fn same_columns(a: &Schema, b: &Schema) -> bool {
    a.fields().len() == b.fields().len()
        && a.fields().iter().zip(b.fields()).all(|(x, y)| {
            x.name() == y.name()
                && iceberg_type(x.data_type()) == iceberg_type(y.data_type())
                && field_id(x).ok() == field_id(y).ok()
        })
}

/// A snapshot a commit makes.
struct NewSnapshot<'a> {
    target: &'a WriteTarget,
    /// The table's directory, as the metadata names it ([`literal_location`]).
    base: &'a str,
    /// The schema its files were written with.
    schema_id: i64,
    id: i64,
    /// The table's current snapshot, and its summary.
    parent: Option<(i64, &'a Value)>,
    sequence: i64,
    now: i64,
    list_url: String,
    files: &'a [WrittenFile],
}

impl NewSnapshot<'_> {
    /// Its entry in the metadata's `snapshots`.
    fn json(&self) -> Value {
        let mut s = json!({
            "snapshot-id": self.id,
            "sequence-number": self.sequence,
            "timestamp-ms": self.now,
            "manifest-list": self.list_url,
            "summary": summary(&self.target.job_id, self.files, self.parent.map(|p| p.1)),
            "schema-id": self.schema_id,
        });
        if let Some((p, _)) = self.parent {
            s["parent-snapshot-id"] = json!(p);
        }
        s
    }
}

/// The first metadata of a table, with its first snapshot.
fn new_table(layout: &Layout, snapshot: &NewSnapshot) -> Result<Value> {
    let (target, now) = (snapshot.target, snapshot.now);
    let spec = spec_fields(layout)?;
    let last_partition_id = FIRST_PARTITION_FIELD_ID - 1 + spec.len() as i64;
    Ok(json!({
        "format-version": 2,
        "table-uuid": uuid::Uuid::new_v4().to_string(),
        "location": snapshot.base.trim_end_matches('/'),
        "last-sequence-number": 1,
        "last-updated-ms": now,
        "last-column-id": layout.schema.fields().len(),
        "current-schema-id": 0,
        "schemas": [schema_json(&layout.schema, 0)?],
        "default-spec-id": 0,
        "partition-specs": [{"spec-id": 0, "fields": spec}],
        "last-partition-id": last_partition_id,
        "default-sort-order-id": 0,
        "sort-orders": [{"order-id": 0, "fields": []}],
        "properties": {CREATED_BY: target.job_id, "write.parquet.compression-codec": "zstd"},
        "current-snapshot-id": snapshot.id,
        "refs": {"main": {"snapshot-id": snapshot.id, "type": "branch"}},
        "snapshots": [snapshot.json()],
        "snapshot-log": [{"timestamp-ms": now, "snapshot-id": snapshot.id}],
        "metadata-log": [],
    }))
}

/// `metadata` (the table's newest, at `previous`) with `snapshot` appended: every field
/// this engine does not change is kept as it was.
fn appended(metadata: &Value, previous: &str, snapshot: &NewSnapshot) -> Value {
    let mut next = metadata.clone();
    let push = |next: &mut Value, key: &str, item: Value| {
        if !next[key].is_array() {
            next[key] = json!([]);
        }
        if let Some(a) = next[key].as_array_mut() {
            a.push(item);
        }
    };
    push(&mut next, "snapshots", snapshot.json());
    push(
        &mut next,
        "snapshot-log",
        json!({"timestamp-ms": snapshot.now, "snapshot-id": snapshot.id}),
    );
    push(
        &mut next,
        "metadata-log",
        json!({"timestamp-ms": metadata["last-updated-ms"], "metadata-file": previous}),
    );
    next["last-sequence-number"] = json!(snapshot.sequence);
    next["last-updated-ms"] = json!(snapshot.now);
    next["current-snapshot-id"] = json!(snapshot.id);
    if !next["refs"].is_object() {
        next["refs"] = json!({});
    }
    next["refs"]["main"] = json!({"snapshot-id": snapshot.id, "type": "branch"});
    next
}

/// Whether the Iceberg commit of `target`'s job is in the table's metadata.
pub async fn committed(services: &Services, target: &WriteTarget) -> Result<bool> {
    let (store, root) = store_of(services, &target.location)?;
    if !target.append {
        return Ok(read_version(store.as_ref(), &root, 1)
            .await?
            .is_some_and(|m| created_by(&m, &target.job_id)));
    }
    Ok(newest(store.as_ref(), &root)
        .await?
        .is_some_and(|(_, _, m)| has_job(&m, &target.job_id)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_are_icebergs_or_refused_by_name() {
        assert_eq!(iceberg_arrow_type(&DataType::Int16), DataType::Int32);
        assert_eq!(
            iceberg_arrow_type(&DataType::Timestamp(
                TimeUnit::Nanosecond,
                Some("+01:00".into())
            )),
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
        );
        let schema = DFSchema::try_from(Schema::new(vec![
            Field::new("a", DataType::Int64, true),
            Field::new("x", DataType::Float64, true),
            Field::new("l", DataType::new_list(DataType::Int32, true), true),
        ]))
        .unwrap();
        let e = table_schema(&schema, &[]).unwrap_err().to_string();
        assert!(e.contains("column l is List"), "{e}");
        let schema = DFSchema::try_from(Schema::new(vec![
            Field::new("a", DataType::Int64, true),
            Field::new("x", DataType::Float64, true),
        ]))
        .unwrap();
        let e = table_schema(&schema, &["x".into()])
            .unwrap_err()
            .to_string();
        assert!(e.contains("partition column x is Float64"), "{e}");
        let ok = table_schema(&schema, &["a".into()]).unwrap();
        assert_eq!(field_id(ok.field(0)).unwrap(), 1);
        assert_eq!(field_id(ok.field(1)).unwrap(), 2);
    }

    #[test]
    fn partition_values_and_bounds_have_icebergs_binary_form() {
        let (v, b) = partition_value(Some("1970-01-02"), &DataType::Date32)
            .unwrap()
            .unwrap();
        assert_eq!((v, b), (Avro::Date(1), vec![1, 0, 0, 0]));
        let (_, b) = partition_value(Some("-2"), &DataType::Int64)
            .unwrap()
            .unwrap();
        assert_eq!(b, (-2i64).to_le_bytes().to_vec());
        assert!(partition_value(None, &DataType::Utf8).unwrap().is_none());
        assert!(partition_value(Some("x"), &DataType::Int32).is_err());
        assert_eq!(
            bound_bytes(&json!("ab"), &DataType::Utf8),
            Some(b"ab".to_vec())
        );
        assert_eq!(bound_bytes(&json!(1.5), &DataType::Float64), None);
    }

    #[test]
    fn avro_names_are_made_as_icebergs_java_writer_makes_them() {
        assert_eq!(avro_name("ship_month"), "ship_month");
        assert_eq!(avro_name("sale-date"), "sale_x2Ddate");
        assert_eq!(avro_name("1st"), "_1st");
        assert_eq!(avro_name("é"), "_xE9");
    }

    #[test]
    fn a_commit_is_never_timed_before_the_metadata_it_follows() {
        let later = crate::time::now_ms() as i64 + 3_600_000;
        let metadata = json!({
            "last-updated-ms": 5,
            "snapshot-log": [{"timestamp-ms": 1}, {"timestamp-ms": later}],
            "metadata-log": [],
        });
        assert_eq!(commit_time(&metadata), later);
        assert!(commit_time(&json!({})) >= crate::time::now_ms() as i64 - 1000);
    }

    #[test]
    fn metadata_files_of_other_catalogs_are_not_versions() {
        assert_eq!(version_of("v12.metadata.json"), Some(12));
        assert_eq!(version_of("00003-1a2b.metadata.json"), None);
        assert_eq!(version_of("v1.metadata.json.tmp"), None);
    }

    #[test]
    fn appends_to_other_layouts_are_refused() {
        let metadata = json!({
            "format-version": 2, "current-schema-id": 0,
            "schemas": [{"schema-id": 0, "fields": [
                {"id": 1, "name": "a", "type": "long", "required": false},
                {"id": 2, "name": "t", "type": "timestamp", "required": false}]}],
            "default-spec-id": 0,
            "partition-specs": [{"spec-id": 0, "fields": [
                {"source-id": 2, "field-id": 1000, "name": "t_day", "transform": "day"}]}],
        });
        let e = Layout::of(&metadata).err().unwrap();
        assert!(e.contains("\"day\""), "{e}");
        let mut v1 = metadata.clone();
        v1["format-version"] = json!(1);
        assert!(Layout::of(&v1).err().unwrap().contains("format version 1"));
        let mut identity = metadata;
        identity["partition-specs"][0]["fields"][0]["transform"] = json!("identity");
        identity["partition-specs"][0]["fields"][0]["field-id"] = json!(1003);
        let layout = Layout::of(&identity).unwrap();
        assert_eq!(layout.partition_by, vec!["t".to_string()]);
        assert_eq!(layout.partition_fields, vec![(1003, "t_day".to_string())]);
        assert_eq!(field_id(layout.schema.field(1)).unwrap(), 2);
        identity["schemas"][0]["fields"][0]["required"] = json!(true);
        assert!(Layout::of(&identity)
            .err()
            .unwrap()
            .contains("column a is required"));
    }
}
