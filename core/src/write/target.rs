//! What a write writes, where: its target ([`WriteTarget`]) from `COPY` or from
//! `CREATE TABLE ... AS` (with Athena's table options), and the checks on its location
//! ([`check_target`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::datatypes::Schema;
use datafusion::datasource::listing::ListingTableUrl;
use datafusion::logical_expr::dml::CopyTo;
use datafusion::parquet::basic::Compression;
use datafusion::parquet::file::properties::WriterProperties;
use futures::TryStreamExt;
use object_store::ObjectStoreExt;
use serde::{Deserialize, Serialize};

use super::{sink, MANIFEST};
use crate::{Error, Result, Services};

use super::store_of;

/// The file formats a write makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum WriteFormat {
    /// Apache Parquet, zstd-compressed by default.
    Parquet,
    /// CSV with a header line.
    Csv,
    /// Newline-delimited JSON.
    Json,
    /// A Delta Lake table: Parquet files and one commit to the table's log
    /// ([`super::delta`]).
    Delta,
    /// An Apache Iceberg table: Parquet files and one snapshot committed by the table's
    /// next metadata file ([`super::iceberg`]).
    Iceberg,
}

impl WriteFormat {
    /// The name in `STORED AS`.
    pub fn name(self) -> &'static str {
        match self {
            WriteFormat::Parquet => "PARQUET",
            WriteFormat::Csv => "CSV",
            WriteFormat::Json => "JSON",
            WriteFormat::Delta => "DELTA",
            WriteFormat::Iceberg => "ICEBERG",
        }
    }

    /// The extension of its files.
    pub fn extension(self) -> &'static str {
        match self {
            WriteFormat::Parquet | WriteFormat::Delta | WriteFormat::Iceberg => "parquet",
            WriteFormat::Csv => "csv",
            WriteFormat::Json => "json",
        }
    }

    /// Whether it is a table format with a log of its own (Delta, Iceberg): the commit
    /// appends to that log, and a file it lists must never be deleted.
    pub fn has_log(self) -> bool {
        matches!(self, WriteFormat::Delta | WriteFormat::Iceberg)
    }

    /// The options a statement may give it (`OPTIONS (key value, ...)`).
    fn options(self) -> &'static [&'static str] {
        match self {
            WriteFormat::Parquet | WriteFormat::Delta | WriteFormat::Iceberg => {
                &["compression", "max_row_group_size"]
            }
            WriteFormat::Csv => &["has_header", "delimiter"],
            WriteFormat::Json => &[],
        }
    }
}

/// What a write job writes, where: recorded on its job, carried by its writing stage's
/// plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteTarget {
    /// The job writing: every file it writes is named after it.
    pub job_id: String,
    /// The directory written, a URL ending in `/` (`s3://bucket/prefix/`,
    /// `file:///dir/`).
    pub location: String,
    /// The files' format.
    pub format: WriteFormat,
    /// Columns whose values name directories (`column=value/`), left out of the files.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub partition_by: Vec<String>,
    /// The format's options, by their names without `format.`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub options: BTreeMap<String, String>,
    /// `CREATE TABLE ... AS`: the catalog table the commit creates over the files;
    /// `INSERT INTO`: the table appended to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<String>,
    /// `INSERT INTO` an existing (Delta) table: the commit appends to it, and the location
    /// is the table's own, with its files in it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub append: bool,
    /// A Delta table's columns, partition columns included ([`crate::plan::encode_schema`]):
    /// what a new table is created with, what an append expects to find.
    #[serde(
        default,
        with = "crate::state::b64",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub table_schema: Vec<u8>,
    /// The columns the files hold ([`crate::plan::encode_schema`]): a write of no rows
    /// still leaves one file with them.
    #[serde(
        default,
        with = "crate::state::b64",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub schema: Vec<u8>,
}

/// The columns of `input` the files of a write partitioned by `partition_by` hold.
fn file_schema(input: &datafusion::common::DFSchema, partition_by: &[String]) -> Result<Vec<u8>> {
    let fields: Vec<_> = input
        .fields()
        .iter()
        .filter(|f| !partition_by.contains(f.name()))
        .cloned()
        .collect();
    crate::plan::encode_schema(&Arc::new(Schema::new(fields)))
}

impl WriteTarget {
    /// The target of `COPY`, checked: a format this engine writes, options it knows, a
    /// directory (not one file), partition columns the query yields (and not all of them).
    pub fn from_copy(copy: &CopyTo, job_id: &str) -> Result<Self> {
        let invalid = |m: String| Error::InvalidInput(m);
        let format = match copy.file_type.get_ext().to_ascii_lowercase().as_str() {
            "parquet" => WriteFormat::Parquet,
            "csv" => WriteFormat::Csv,
            "json" => WriteFormat::Json,
            other => {
                return Err(invalid(format!(
                    "COPY writes PARQUET, CSV or JSON, not {}",
                    other.to_ascii_uppercase()
                )))
            }
        };
        let location = directory_url(&copy.output_url, format)?;
        let mut options = BTreeMap::new();
        for (key, value) in &copy.options {
            let name = key
                .strip_prefix("format.")
                .unwrap_or(key)
                .to_ascii_lowercase();
            if !format.options().contains(&name.as_str()) {
                let known = if format.options().is_empty() {
                    "none".to_string()
                } else {
                    format.options().join(", ")
                };
                return Err(invalid(format!(
                    "COPY ... STORED AS {} does not take the option '{key}' (it takes: {known})",
                    format.name()
                )));
            }
            options.insert(name, value.clone());
        }
        let columns = copy.input.schema();
        for column in &copy.partition_by {
            if columns.field_with_unqualified_name(column).is_err() {
                return Err(invalid(format!(
                    "PARTITIONED BY names {column}, which the query does not yield"
                )));
            }
        }
        if !copy.partition_by.is_empty() && copy.partition_by.len() >= columns.fields().len() {
            return Err(invalid(
                "PARTITIONED BY names every column the query yields: the files would hold none"
                    .into(),
            ));
        }
        let target = WriteTarget {
            job_id: job_id.to_string(),
            location,
            format,
            partition_by: copy.partition_by.clone(),
            options,
            table: None,
            append: false,
            table_schema: Vec::new(),
            schema: file_schema(copy.input.schema(), &copy.partition_by)?,
        };
        // Malformed option values are refused now, not in every task.
        target.parquet_properties()?;
        target.csv_delimiter()?;
        Ok(target)
    }

    /// The Parquet writer's properties from the options (zstd unless told otherwise).
    pub fn parquet_properties(&self) -> std::result::Result<WriterProperties, Error> {
        let compression = match self.options.get("compression") {
            Some(c) => c
                .parse::<Compression>()
                .map_err(|e| Error::InvalidInput(format!("compression '{c}': {e}")))?,
            None => sink::default_compression(),
        };
        let rows = match self.options.get("max_row_group_size") {
            Some(r) => Some(r.parse::<usize>().ok().filter(|r| *r > 0).ok_or_else(|| {
                Error::InvalidInput(format!(
                    "max_row_group_size '{r}': a positive number of rows"
                ))
            })?),
            None => None,
        };
        Ok(sink::parquet_properties(compression, rows))
    }

    /// Whether CSV files start with a header line (yes, unless `has_header false`).
    pub fn csv_header(&self) -> bool {
        self.options
            .get("has_header")
            .is_none_or(|h| !h.eq_ignore_ascii_case("false"))
    }

    /// The CSV delimiter: one ASCII character, `,` by default.
    pub fn csv_delimiter(&self) -> std::result::Result<u8, Error> {
        match self.options.get("delimiter") {
            None => Ok(b','),
            Some(d) if d.len() == 1 && d.is_ascii() => Ok(d.as_bytes()[0]),
            Some(d) => Err(Error::InvalidInput(format!(
                "delimiter '{d}': one ASCII character"
            ))),
        }
    }
}

/// What `CREATE TABLE name [WITH (...)] AS query` says besides its query, in Athena's
/// words, taken off the statement before DataFusion plans it (it refuses table options).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TableOptions {
    /// `format`: `PARQUET` (the default), `CSV`, `JSON`.
    pub format: Option<String>,
    /// `external_location`: the table's directory; by default `<first write location>/<name>/`.
    pub location: Option<String>,
    /// `partitioned_by`: `ARRAY['col', ...]`.
    pub partitioned_by: Vec<String>,
    /// `write_compression` (Parquet): `ZSTD`, `SNAPPY`, `GZIP`, ...
    pub compression: Option<String>,
}

/// Takes the table options off a `CREATE TABLE ... AS` statement, returning them; `None`
/// for any other statement (left untouched). Unknown options are refused by name.
pub fn take_table_options(
    statement: &mut datafusion::sql::parser::Statement,
) -> Result<Option<TableOptions>> {
    use datafusion::sql::sqlparser::ast::{CreateTableOptions, SqlOption, Statement};
    let datafusion::sql::parser::Statement::Statement(inner) = statement else {
        return Ok(None);
    };
    let Statement::CreateTable(create) = inner.as_mut() else {
        return Ok(None);
    };
    if create.query.is_none() {
        return Ok(None);
    }
    let mut table = TableOptions::default();
    let options = match std::mem::take(&mut create.table_options) {
        CreateTableOptions::None => Vec::new(),
        CreateTableOptions::With(options) => options,
        other => {
            return Err(Error::InvalidInput(format!(
                "CREATE TABLE ... AS takes its options as WITH (format = 'PARQUET', \
                 external_location = '...', partitioned_by = ARRAY['col']), not {other}"
            )))
        }
    };
    take_hive_words(create, &mut table)?;
    for option in options {
        let SqlOption::KeyValue { key, value } = option else {
            return Err(Error::InvalidInput(format!(
                "CREATE TABLE ... AS: option {option} is not key = value"
            )));
        };
        let name = key.value.to_ascii_lowercase();
        let text = |value: &datafusion::sql::sqlparser::ast::Expr| -> Result<String> {
            option_text(value).ok_or_else(|| {
                Error::InvalidInput(format!(
                    "CREATE TABLE ... AS: {name} = {value} is not a string"
                ))
            })
        };
        let hive_said = match name.as_str() {
            "format" => table.format.is_some(),
            "external_location" | "location" => table.location.is_some(),
            "partitioned_by" => !table.partitioned_by.is_empty(),
            _ => false,
        };
        if hive_said {
            return Err(Error::InvalidInput(format!(
                "CREATE TABLE ... AS: {name} is said twice, in Hive's words and in WITH (...)"
            )));
        }
        match name.as_str() {
            "format" => table.format = Some(text(&value)?),
            "external_location" | "location" => table.location = Some(text(&value)?),
            "write_compression" | "compression" => table.compression = Some(text(&value)?),
            "partitioned_by" => {
                let datafusion::sql::sqlparser::ast::Expr::Array(array) = &value else {
                    return Err(Error::InvalidInput(format!(
                        "CREATE TABLE ... AS: partitioned_by = {value}: write ARRAY['col', ...]"
                    )));
                };
                table.partitioned_by = array.elem.iter().map(&text).collect::<Result<_>>()?;
            }
            other => {
                return Err(Error::InvalidInput(format!(
                    "CREATE TABLE ... AS does not take the option {other} (it takes format, \
                     external_location, partitioned_by, write_compression)"
                )))
            }
        }
    }
    Ok(Some(table))
}

/// Takes Hive's words for a `CREATE TABLE ... AS` off `create` (as sqlparser reads
/// them: `PARTITIONED BY (col, ...)`, `STORED AS PARQUET|TEXTFILE|JSONFILE`, `LOCATION
/// '...'`, and Spark's `USING iceberg|delta|...` where a dialect reads it) into `table`. Anything else Hive's syntax says (a row format, SerDe
/// properties, input and output formats, typed partition columns) is refused by name.
fn take_hive_words(
    create: &mut datafusion::sql::sqlparser::ast::CreateTable,
    table: &mut TableOptions,
) -> Result<()> {
    use datafusion::sql::sqlparser::ast::{
        DataType, FileFormat, HiveDistributionStyle, HiveIOFormat,
    };
    let refuse = |what: String| {
        Err(Error::InvalidInput(format!(
            "CREATE TABLE ... AS does not take {what}; it takes PARTITIONED BY (col, ...), \
             STORED AS PARQUET|TEXTFILE|JSONFILE and LOCATION '...', or Athena's WITH \
             (format = 'PARQUET'|'CSV'|'JSON'|'DELTA'|'ICEBERG', external_location = '...', \
             partitioned_by = ARRAY['col'])"
        )))
    };
    match std::mem::replace(&mut create.hive_distribution, HiveDistributionStyle::NONE) {
        HiveDistributionStyle::NONE => {}
        HiveDistributionStyle::PARTITIONED { columns } => {
            for column in columns {
                if column.data_type != DataType::Unspecified || !column.options.is_empty() {
                    return refuse(format!(
                        "a typed partition column ({column}): name a column the query yields"
                    ));
                }
                table.partitioned_by.push(column.name.value);
            }
        }
        other => return refuse(format!("{other:?}")),
    }
    let Some(hive) = create.hive_formats.take() else {
        return Ok(());
    };
    if hive.row_format.is_some() {
        return refuse("ROW FORMAT".into());
    }
    if hive.serde_properties.is_some() {
        return refuse("SerDe properties".into());
    }
    match hive.storage {
        None => {}
        Some(HiveIOFormat::FileFormat { format }) => {
            table.format = Some(
                match format {
                    FileFormat::PARQUET => "PARQUET",
                    FileFormat::TEXTFILE => "CSV",
                    FileFormat::JSONFILE => "JSON",
                    other => return refuse(format!("STORED AS {other}")),
                }
                .to_string(),
            );
        }
        // Spark's `USING iceberg`, `USING delta`, ...: checked as `format` is.
        Some(HiveIOFormat::Using { format }) => {
            table.format = Some(format.value.to_ascii_uppercase())
        }
        Some(HiveIOFormat::IOF { .. }) => {
            return refuse("STORED AS INPUTFORMAT ... OUTPUTFORMAT ...".into())
        }
    }
    table.location = hive.location;
    Ok(())
}

/// The text of an option's value: a quoted string, a number or a bare word.
fn option_text(value: &datafusion::sql::sqlparser::ast::Expr) -> Option<String> {
    use datafusion::sql::sqlparser::ast::{Expr, Value};
    match value {
        Expr::Value(v) => match &v.value {
            Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => Some(s.clone()),
            Value::Number(n, _) => Some(n.to_string()),
            _ => None,
        },
        Expr::Identifier(i) => Some(i.value.clone()),
        _ => None,
    }
}

impl WriteTarget {
    /// The target of `CREATE TABLE name AS query` with `options`: the files of a new
    /// table, at its own location (by default `<first write location>/<name>/`).
    pub fn for_table(
        name: &str,
        input_schema: &datafusion::common::DFSchema,
        options: &TableOptions,
        access: &crate::access::AccessPolicy,
        job_id: &str,
    ) -> Result<Self> {
        let invalid = |m: String| Error::InvalidInput(m);
        let format = match options
            .format
            .as_deref()
            .unwrap_or("PARQUET")
            .to_ascii_uppercase()
            .as_str()
        {
            "PARQUET" => WriteFormat::Parquet,
            "CSV" | "TEXTFILE" => WriteFormat::Csv,
            "JSON" => WriteFormat::Json,
            "DELTA" => WriteFormat::Delta,
            "ICEBERG" => WriteFormat::Iceberg,
            other => {
                return Err(invalid(format!(
                    "CREATE TABLE ... AS writes PARQUET, CSV, JSON, DELTA or ICEBERG tables, \
                     not {other}"
                )))
            }
        };
        let location = match &options.location {
            Some(l) => l.clone(),
            None => {
                let Some(base) = access.write_locations.first() else {
                    return Err(invalid(format!(
                        "CREATE TABLE {name} AS needs a place to write its files, and no \
                         write location is configured: add one with {}, or name one with \
                         WITH (external_location = '...')",
                        access.write_setting
                    )));
                };
                format!("{}/{name}/", base.trim_end_matches('/'))
            }
        };
        let mut settings = BTreeMap::new();
        if let Some(c) = &options.compression {
            if !matches!(
                format,
                WriteFormat::Parquet | WriteFormat::Delta | WriteFormat::Iceberg
            ) {
                return Err(invalid(format!(
                    "write_compression applies to PARQUET tables, not {}",
                    format.name()
                )));
            }
            settings.insert("compression".to_string(), c.to_ascii_lowercase());
        }
        for column in &options.partitioned_by {
            if input_schema.field_with_unqualified_name(column).is_err() {
                return Err(invalid(format!(
                    "partitioned_by names {column}, which the query does not yield"
                )));
            }
        }
        if format != WriteFormat::Iceberg
            && !options.partitioned_by.is_empty()
            && options.partitioned_by.len() >= input_schema.fields().len()
        {
            return Err(invalid(
                "partitioned_by names every column the query yields: the files would hold none"
                    .into(),
            ));
        }
        let (table_schema, schema) = match format {
            WriteFormat::Delta => {
                // Refuses columns Delta has no type for, now rather than at the commit.
                super::delta::table_schema(input_schema, &options.partitioned_by)?;
                (
                    crate::plan::encode_schema(&Arc::new(input_schema.as_arrow().clone()))?,
                    file_schema(input_schema, &options.partitioned_by)?,
                )
            }
            WriteFormat::Iceberg => {
                // Iceberg's files hold every column, each with its field id.
                let columns = super::iceberg::table_schema(input_schema, &options.partitioned_by)?;
                let encoded = crate::plan::encode_schema(&columns)?;
                (encoded.clone(), encoded)
            }
            _ => (
                Vec::new(),
                file_schema(input_schema, &options.partitioned_by)?,
            ),
        };
        let target = WriteTarget {
            job_id: job_id.to_string(),
            location: directory_url(&location, format)?,
            format,
            partition_by: options.partitioned_by.clone(),
            options: settings,
            table: Some(name.to_string()),
            append: false,
            table_schema,
            schema,
        };
        target.parquet_properties()?;
        Ok(target)
    }

    /// The target of `INSERT INTO name query`: the files of an append to the Iceberg
    /// table at `location` (its directory), partitioned by `partition_by`, of the
    /// columns `columns` (the table's own, with their field ids: DataFusion casts the
    /// query to them).
    pub fn for_iceberg_insert(
        name: &str,
        location: &str,
        partition_by: Vec<String>,
        columns: &Schema,
        job_id: &str,
    ) -> Result<Self> {
        let encoded = crate::plan::encode_schema(&Arc::new(columns.clone()))?;
        Ok(WriteTarget {
            job_id: job_id.to_string(),
            location: directory_url(location, WriteFormat::Iceberg)?,
            format: WriteFormat::Iceberg,
            options: BTreeMap::new(),
            table: Some(name.to_string()),
            append: true,
            table_schema: encoded.clone(),
            schema: encoded,
            partition_by,
        })
    }

    /// The target of `INSERT INTO name query`: the files of an append to the Delta
    /// table at `location` (its directory), partitioned by `partition_by`, of the
    /// columns `input_schema` (the table's own: DataFusion casts the query to them).
    pub fn for_insert(
        name: &str,
        location: &str,
        partition_by: Vec<String>,
        input_schema: &datafusion::common::DFSchema,
        job_id: &str,
    ) -> Result<Self> {
        super::delta::table_schema(input_schema, &partition_by)
            .map_err(|e| Error::InvalidInput(format!("INSERT INTO {name}: {e}")))?;
        Ok(WriteTarget {
            job_id: job_id.to_string(),
            location: directory_url(location, WriteFormat::Delta)?,
            format: WriteFormat::Delta,
            options: BTreeMap::new(),
            table: Some(name.to_string()),
            append: true,
            table_schema: crate::plan::encode_schema(&Arc::new(input_schema.as_arrow().clone()))?,
            schema: file_schema(input_schema, &partition_by)?,
            partition_by,
        })
    }

    /// The statement the table a `CREATE TABLE ... AS` made is recorded with.
    pub fn table_ddl(&self, name: &str) -> String {
        format!(
            "CREATE EXTERNAL TABLE \"{}\" STORED AS {} LOCATION '{}'",
            name.replace('"', "\"\""),
            self.format.name(),
            self.location.replace('\'', "''")
        )
    }
}

/// `location` as the URL of a directory (ending in `/`). A name ending in the format's
/// extension is one file, which one writer would have to write: refused.
pub(super) fn directory_url(location: &str, format: WriteFormat) -> Result<String> {
    let trimmed = location.trim();
    let last = trimmed.rsplit('/').next().unwrap_or_default();
    if !trimmed.ends_with('/') && last.contains('.') {
        return Err(Error::InvalidInput(format!(
            "a write makes a directory of files (every task of the query writes its own): \
             {location} names one file; name a directory instead, such as '{}/'",
            trimmed.trim_end_matches(&format!(".{}", format.extension()))
        )));
    }
    let url = ListingTableUrl::parse(format!("{}/", trimmed.trim_end_matches('/')))
        .map_err(|e| Error::InvalidInput(format!("{location}: {e}")))?;
    Ok(url.as_str().to_string())
}

/// Refuses a write to `target` unless it lies inside a write location, outside the
/// engine's own and every catalog table's locations (but the table an `INSERT INTO`
/// appends to), and holds nothing yet (but for an append).
pub async fn check_target(services: &Services, target: &WriteTarget) -> Result<()> {
    services
        .config
        .access
        .check_write_location(&target.location)?;
    for table in services.store.list_tables().await? {
        if target.append && target.table.as_deref() == Some(table.name.as_str()) {
            continue;
        }
        for location in &table.locations {
            let inside = |a: &str, b: &str| {
                a.trim_end_matches('/') == b.trim_end_matches('/')
                    || a.starts_with(&format!("{}/", b.trim_end_matches('/')))
            };
            if inside(&target.location, location) || inside(location, &target.location) {
                return Err(Error::InvalidInput(format!(
                    "{} is, or contains, the location of table {} ({location}): a write goes \
                     to a location of its own, not a table's",
                    target.location, table.name
                )));
            }
        }
    }
    if target.append {
        return Ok(());
    }
    let (store, root) = store_of(services, &target.location)?;
    // A Delta table's log is hidden from listings of its directory: looked for by name.
    let log = root.clone().join("_delta_log");
    if let Some(entry) = store
        .list(Some(&log))
        .try_next()
        .await
        .map_err(Error::from)?
    {
        return Err(Error::Conflict(format!(
            "{} holds a Delta table (its log holds {}): a write goes to an empty location; \
             to add rows to the table, register it (CREATE EXTERNAL TABLE ... STORED AS \
             DELTA) and INSERT INTO it",
            target.location, entry.location
        )));
    }
    // Listings leave markers out ([`crate::hidden`]): a manifest is looked for by name.
    let manifest = root.clone().join(MANIFEST);
    let first = match store.head(&manifest).await {
        Ok(meta) => Some(meta),
        Err(object_store::Error::NotFound { .. }) => store
            .list(Some(&root))
            .try_next()
            .await
            .map_err(Error::from)?,
        Err(e) => return Err(e.into()),
    };
    if let Some(first) = first {
        return Err(Error::Conflict(format!(
            "{} is not empty (it holds {}, among others perhaps): a write goes to an empty \
             location; name a new one, or delete what is there",
            target.location, first.location
        )));
    }
    Ok(())
}
