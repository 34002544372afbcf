//! Hive tables of Glue: Parquet, CSV and JSON files in a location and its partitions.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::{DFSchema, ScalarValue};
use datafusion::datasource::file_format::csv::CsvFormat;
use datafusion::datasource::file_format::file_compression_type::FileCompressionType;
use datafusion::datasource::file_format::json::JsonFormat;
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::file_format::FileFormat;
use datafusion::datasource::listing::{ListingTableUrl, PartitionedFile};
use datafusion::datasource::physical_plan::{FileScanConfigBuilder, ParquetSource};
use datafusion::datasource::table_schema::TableSchema;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::logical_expr::utils::{conjunction, split_conjunction};
use datafusion::logical_expr::{
    BinaryExpr, Expr, Operator, TableProviderFilterPushDown, TableType,
};
use datafusion::physical_plan::ExecutionPlan;
use futures::{StreamExt, TryStreamExt};
use object_store::ObjectMeta;

use super::{hive_type, refuse, GlueClient, GlueColumn, GlueTable, CATALOG, MAX_PARTITIONS};
use crate::access::AccessPolicy;
use crate::Error;

/// The table provider of a Hive table (see the [module docs](super)): its location and
/// every partition's pass the allow-list, its SerDe names the format.
pub(super) fn table(
    access: &AccessPolicy,
    client: Arc<dyn GlueClient>,
    table: GlueTable,
) -> DfResult<Arc<dyn TableProvider>> {
    let location = table
        .location
        .clone()
        .filter(|l| !l.is_empty())
        .ok_or_else(|| refuse(&table, "it has no location"))?;
    access
        .check_location(&location)
        .map_err(|e| refuse(&table, e))?;
    let format = HiveFormat::of(&table)?;
    let column = |c: &GlueColumn| -> DfResult<Field> {
        let data_type = hive_type(&c.type_name).map_err(|e| {
            refuse(
                &table,
                format!("column {} has the type {:?}: {e}", c.name, c.type_name),
            )
        })?;
        Ok(Field::new(c.name.to_ascii_lowercase(), data_type, true))
    };
    let columns = table
        .columns
        .iter()
        .map(column)
        .collect::<DfResult<Vec<_>>>()?;
    let keys = table
        .partition_keys
        .iter()
        .map(column)
        .collect::<DfResult<Vec<_>>>()?;
    if columns.is_empty() {
        return Err(refuse(&table, "it has no columns"));
    }
    if matches!(format, HiveFormat::Csv { .. }) {
        if let Some((c, _)) = table
            .columns
            .iter()
            .zip(&columns)
            .find(|(_, f)| f.data_type().is_nested())
        {
            return Err(refuse(
                &table,
                format!(
                    "column {} has the type {}, which lambdafusion does not read from text \
                     files",
                    c.name, c.type_name
                ),
            ));
        }
    }
    let mut all = columns.clone();
    all.extend(keys.iter().cloned());
    let schema = Arc::new(Schema::new(all));
    Ok(Arc::new(HiveTable {
        label: format!("{CATALOG}.{}.{}", table.database, table.name),
        table,
        location,
        schema,
        file_columns: columns.len(),
        keys,
        format,
        client,
        access: access.clone(),
        listed: std::sync::Mutex::new(std::collections::HashMap::new()),
    }))
}

/// How a Hive table's files are read, from its SerDe.
#[derive(Debug, Clone)]
enum HiveFormat {
    Parquet,
    Csv {
        delimiter: u8,
        quote: Option<u8>,
        escape: Option<u8>,
        header: bool,
        null: Option<String>,
    },
    Json,
}

impl HiveFormat {
    fn of(table: &GlueTable) -> DfResult<Self> {
        let serde = table.serde.as_deref().unwrap_or_default();
        let input = table.input_format.as_deref().unwrap_or_default();
        let serde_param = |key: &str| table.serde_parameters.get(key).map(String::as_str);
        let byte = |key: &str, default: Option<u8>| -> DfResult<Option<u8>> {
            match serde_param(key) {
                None => Ok(default),
                Some(v) => single_byte(v).map(Some).ok_or_else(|| {
                    refuse(
                        table,
                        format!("its SerDe parameter {key} = {v:?} is not one character"),
                    )
                }),
            }
        };
        let header = match table
            .parameters
            .get("skip.header.line.count")
            .map(|v| v.trim())
        {
            None | Some("0") => false,
            Some("1") => true,
            Some(other) => {
                return Err(refuse(
                    table,
                    format!(
                        "skip.header.line.count is {other:?}; only 0 and 1 header lines are \
                         supported"
                    ),
                ))
            }
        };
        if serde.contains("ParquetHiveSerDe") || input.contains("MapredParquetInputFormat") {
            Ok(Self::Parquet)
        } else if serde == "org.apache.hadoop.hive.serde2.lazy.LazySimpleSerDe" {
            // Hive's text format: fields split on the delimiter (default ^A), no quoting,
            // `\N` for null unless the table says otherwise.
            let delimiter = match serde_param("field.delim").or(serde_param("serialization.format"))
            {
                None => 0x01,
                Some(v) => single_byte(v).ok_or_else(|| {
                    refuse(
                        table,
                        format!("its field delimiter {v:?} is not one character"),
                    )
                })?,
            };
            let null = serde_param("serialization.null.format")
                .unwrap_or("\\N")
                .to_string();
            Ok(Self::Csv {
                delimiter,
                quote: None,
                escape: byte("escape.delim", None)?,
                header,
                null: Some(null),
            })
        } else if serde == "org.apache.hadoop.hive.serde2.OpenCSVSerde" {
            Ok(Self::Csv {
                delimiter: byte("separatorChar", Some(b','))?.unwrap_or(b','),
                quote: byte("quoteChar", Some(b'"'))?,
                escape: byte("escapeChar", Some(b'\\'))?,
                header,
                null: None,
            })
        } else if matches!(
            serde,
            "org.openx.data.jsonserde.JsonSerDe"
                | "org.apache.hive.hcatalog.data.JsonSerDe"
                | "org.apache.hadoop.hive.serde2.JsonSerDe"
        ) {
            Ok(Self::Json)
        } else {
            let what = if serde.is_empty() { input } else { serde };
            Err(refuse(
                table,
                format!(
                    "its SerDe {what:?} is not one lambdafusion reads (Parquet, CSV with \
                     LazySimpleSerDe or OpenCSVSerde, JSON)"
                ),
            ))
        }
    }

    /// DataFusion's file format for files compressed as `compression`.
    fn file_format(&self, compression: FileCompressionType) -> Arc<dyn FileFormat> {
        match self {
            Self::Parquet => Arc::new(ParquetFormat::default()),
            Self::Csv {
                delimiter,
                quote,
                escape,
                header,
                null: _,
            } => {
                let mut format = CsvFormat::default()
                    .with_delimiter(*delimiter)
                    .with_has_header(*header)
                    .with_escape(*escape)
                    .with_file_compression_type(compression);
                // Without quoting, a quote is data: a byte that cannot be in text.
                format = format.with_quote(quote.unwrap_or(0));
                Arc::new(format)
            }
            Self::Json => Arc::new(JsonFormat::default().with_file_compression_type(compression)),
        }
    }
}

/// The one byte `v` names: a character, or Hive's octal/decimal escapes (`\001`, `1`).
fn single_byte(v: &str) -> Option<u8> {
    // As Hive reads it: a number is the byte's value (`1` is ^A), else the character.
    if let Ok(b) = v.parse::<u8>() {
        return (b < 128).then_some(b);
    }
    if v.len() == 1 {
        return Some(v.as_bytes()[0]);
    }
    match v.strip_prefix('\\')? {
        "t" => Some(b'\t'),
        "n" => Some(b'\n'),
        octal => u8::from_str_radix(octal, 8).ok(),
    }
}

/// A Hive table of Glue: its files listed at planning, partitions chosen by Glue.
struct HiveTable {
    label: String,
    table: GlueTable,
    location: String,
    /// Data columns, then partition keys.
    schema: SchemaRef,
    file_columns: usize,
    keys: Vec<Field>,
    format: HiveFormat,
    client: Arc<dyn GlueClient>,
    access: AccessPolicy,
    /// What each set of filters listed so far (partitions from Glue, their files): the
    /// planner sizes a scan before it plans it ([`crate::plan::dimension_joins`]) with
    /// the same filters. A provider lives for one query (the catalog opens the table
    /// for each), so the second listing would be this one.
    listed: std::sync::Mutex<std::collections::HashMap<String, Vec<Listed>>>,
}

/// One partition directory of a scan: its store, its files, its partition values.
type Listed = (
    datafusion::execution::object_store::ObjectStoreUrl,
    Vec<ObjectMeta>,
    Vec<ScalarValue>,
);

impl fmt::Debug for HiveTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HiveTable")
            .field("table", &self.label)
            .finish_non_exhaustive()
    }
}

impl HiveTable {
    /// The directories to read, each with its partition values: the partitions Glue
    /// selects with the filters on partition keys, or the table's location.
    async fn directories(&self, filters: &[Expr]) -> DfResult<Vec<(String, Vec<ScalarValue>)>> {
        if self.keys.is_empty() {
            return Ok(vec![(self.location.clone(), Vec::new())]);
        }
        let expression = partition_expression(&self.keys, filters);
        let (database, name) = (&self.table.database, &self.table.name);
        let partitions = match self
            .client
            .partitions(database, name, expression.as_deref())
            .await
        {
            // An expression this Glue cannot parse costs pruning, never the query.
            Err(Error::InvalidInput(why)) if expression.is_some() => {
                tracing::warn!(table = %self.label, %why, "Glue refused the partition filter");
                self.client.partitions(database, name, None).await
            }
            other => other,
        }
        .map_err(|e| DataFusionError::External(Box::new(e)))?;
        if partitions.len() > MAX_PARTITIONS {
            return Err(refuse(
                &self.table,
                format!(
                    "the query selects {} partitions, more than {MAX_PARTITIONS}; filter on \
                     its partition keys ({})",
                    partitions.len(),
                    self.keys
                        .iter()
                        .map(|k| k.name().as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
        let mut out = Vec::with_capacity(partitions.len());
        for partition in partitions {
            let Some(location) = partition.location.filter(|l| !l.is_empty()) else {
                continue;
            };
            if partition.values.len() != self.keys.len() {
                return Err(refuse(
                    &self.table,
                    format!(
                        "its partition at {location} has {} values for {} partition keys",
                        partition.values.len(),
                        self.keys.len()
                    ),
                ));
            }
            self.access
                .check_location(&location)
                .map_err(|e| refuse(&self.table, format!("a partition cannot be read: {e}")))?;
            let values = self
                .keys
                .iter()
                .zip(&partition.values)
                .map(|(key, raw)| partition_value(raw, key.data_type()))
                .collect::<std::result::Result<Vec<_>, String>>()
                .map_err(|e| refuse(&self.table, format!("a partition at {location}: {e}")))?;
            out.push((location, values));
        }
        Ok(out)
    }
}

/// A partition value as Glue stores it (text), typed by its key; Hive's default
/// partition is null.
fn partition_value(raw: &str, data_type: &DataType) -> std::result::Result<ScalarValue, String> {
    if raw == "__HIVE_DEFAULT_PARTITION__" {
        return ScalarValue::try_from(data_type).map_err(|e| e.to_string());
    }
    ScalarValue::try_from_string(raw.to_string(), data_type)
        .map_err(|_| format!("the partition value {raw:?} is not a {data_type}"))
}

/// The files of one directory that Hive would read: every object below it but hidden
/// ones (a name starting with `_` or `.` at any level below) and folder markers.
async fn list_files(
    state: &dyn Session,
    directory: &str,
) -> DfResult<(
    datafusion::execution::object_store::ObjectStoreUrl,
    Vec<ObjectMeta>,
)> {
    let dir = if directory.ends_with('/') {
        directory.to_string()
    } else {
        format!("{directory}/")
    };
    let url = ListingTableUrl::parse(&dir)?;
    let store = state.runtime_env().object_store(url.object_store())?;
    let prefix = url.prefix().clone();
    let files: Vec<ObjectMeta> = store
        .list(Some(&prefix))
        .try_filter(|meta| {
            let hidden = meta
                .location
                .prefix_match(&prefix)
                .map(|mut rest| {
                    rest.any(|part| {
                        let part = part.as_ref();
                        part.starts_with('_') || part.starts_with('.') || part.ends_with("$folder$")
                    })
                })
                .unwrap_or(true);
            futures::future::ready(!hidden && meta.size > 0)
        })
        .try_collect()
        .await?;
    Ok((url.object_store(), files))
}

/// The compression of a file, from its extension (as Athena decides it).
fn compression_of(path: &str) -> FileCompressionType {
    let lower = path.to_ascii_lowercase();
    if lower.ends_with(".gz") {
        FileCompressionType::GZIP
    } else if lower.ends_with(".bz2") {
        FileCompressionType::BZIP2
    } else if lower.ends_with(".zst") {
        FileCompressionType::ZSTD
    } else if lower.ends_with(".xz") {
        FileCompressionType::XZ
    } else {
        FileCompressionType::UNCOMPRESSED
    }
}

impl HiveTable {
    /// The partition directories `filters` select and their files, listed once per
    /// set of filters.
    async fn list(&self, state: &dyn Session, filters: &[Expr]) -> DfResult<Vec<Listed>> {
        let key = format!("{filters:?}");
        if let Some(listed) = self.listed.lock().unwrap().get(&key) {
            return Ok(listed.clone());
        }
        let directories = self.directories(filters).await?;
        let listed: Vec<Listed> =
            futures::stream::iter(directories.into_iter().map(|(dir, values)| async move {
                let (store, files) = list_files(state, &dir).await?;
                Ok::<_, DataFusionError>((store, files, values))
            }))
            .buffered(32)
            .try_collect()
            .await?;
        self.listed.lock().unwrap().insert(key, listed.clone());
        Ok(listed)
    }
}

#[async_trait]
impl TableProvider for HiveTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> DfResult<Vec<TableProviderFilterPushDown>> {
        // Filters choose partitions and row groups; the rows are filtered again above.
        Ok(vec![TableProviderFilterPushDown::Inexact; filters.len()])
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let listed = self.list(state, filters).await?;

        let mut store_url = None;
        let mut compression: Option<FileCompressionType> = None;
        let mut files = Vec::new();
        for (store, metas, values) in listed {
            if store_url.get_or_insert_with(|| store.clone()) != &store {
                return Err(refuse(
                    &self.table,
                    format!(
                        "its partitions are in more than one bucket ({} and {}); lambdafusion \
                         reads a table from one",
                        store_url.as_ref().map(|u| u.as_str()).unwrap_or_default(),
                        store.as_str()
                    ),
                ));
            }
            for meta in metas {
                if !matches!(self.format, HiveFormat::Parquet) {
                    let this = compression_of(meta.location.as_ref());
                    match compression {
                        None => compression = Some(this),
                        Some(seen) if seen == this => {}
                        Some(_) => {
                            return Err(refuse(
                                &self.table,
                                "its files are compressed in more than one way (by their \
                                 extensions); lambdafusion reads one compression per table",
                            ))
                        }
                    }
                }
                files.push(
                    PartitionedFile::new_from_meta(meta).with_partition_values(values.clone()),
                );
            }
        }
        let logical: Vec<usize> = projection
            .cloned()
            .unwrap_or_else(|| (0..self.schema.fields().len()).collect());
        let Some(store_url) = store_url.filter(|_| !files.is_empty()) else {
            let schema = Arc::new(self.schema.project(&logical)?);
            return Ok(Arc::new(datafusion::physical_plan::empty::EmptyExec::new(
                schema,
            )));
        };
        // Text is read as text, then typed above the scan ([`HiveTable::typed`]).
        let text = matches!(self.format, HiveFormat::Csv { .. });
        let file_fields: Vec<Field> = self.schema.fields()[..self.file_columns]
            .iter()
            .map(|f| match text {
                true => Field::new(f.name(), DataType::Utf8, true),
                false => f.as_ref().clone(),
            })
            .collect();
        let table_schema = TableSchema::builder(Arc::new(Schema::new(file_fields)))
            .with_table_partition_cols(self.keys.iter().cloned().map(Arc::new).collect::<Vec<_>>())
            .build();
        let format = self
            .format
            .file_format(compression.unwrap_or(FileCompressionType::UNCOMPRESSED));
        let source = match self.format {
            HiveFormat::Parquet => {
                let mut source = ParquetSource::new(table_schema.clone());
                if let Some(predicate) = conjunction(filters.iter().cloned()) {
                    let df_schema = DFSchema::try_from(self.schema.as_ref().clone())?;
                    if let Ok(expr) = state.create_physical_expr(predicate, &df_schema) {
                        source = source.with_predicate(expr);
                    }
                }
                Arc::new(source) as Arc<dyn datafusion::datasource::physical_plan::FileSource>
            }
            _ => format.file_source(table_schema.clone()),
        };
        let total: usize = files.iter().map(|f| f.object_meta.size as usize).sum();
        let mut statistics = datafusion::common::Statistics::new_unknown(&self.schema);
        statistics.total_byte_size = datafusion::common::stats::Precision::Inexact(total);
        let groups = crate::plan::split_files(state, files, self.format.splittable());
        let config = FileScanConfigBuilder::new(store_url, source)
            .with_file_groups(groups)
            .with_statistics(statistics)
            .with_projection_indices(Some(logical.clone()))?
            .with_limit(limit)
            .with_file_compression_type(compression.unwrap_or(FileCompressionType::UNCOMPRESSED))
            .build();
        let plan = format.create_physical_plan(state, config).await?;
        self.typed(state, plan, &logical)
    }
}

impl HiveTable {
    /// Types a text table's columns as Hive does: a field equal to the table's null
    /// format is null, and a field that does not parse as its column's type is null
    /// (`TRY_CAST`), never an error. Other formats are typed by their reader.
    fn typed(
        &self,
        state: &dyn Session,
        plan: Arc<dyn ExecutionPlan>,
        logical: &[usize],
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let HiveFormat::Csv { null, .. } = &self.format else {
            return Ok(plan);
        };
        let input = DFSchema::try_from(plan.schema().as_ref().clone())?;
        let exprs = logical
            .iter()
            .map(|&i| {
                let field = self.schema.field(i);
                let mut expr =
                    Expr::Column(datafusion::common::Column::new_unqualified(field.name()));
                if i < self.file_columns {
                    if let Some(null) = null {
                        expr = datafusion::functions::expr_fn::nullif(
                            expr,
                            Expr::Literal(ScalarValue::Utf8(Some(null.clone())), None),
                        );
                    }
                    if field.data_type() != &DataType::Utf8 {
                        expr = Expr::TryCast(datafusion::logical_expr::TryCast::new(
                            Box::new(expr),
                            field.data_type().clone(),
                        ));
                    }
                }
                Ok((
                    state.create_physical_expr(expr, &input)?,
                    field.name().clone(),
                ))
            })
            .collect::<DfResult<Vec<_>>>()?;
        Ok(Arc::new(
            datafusion::physical_plan::projection::ProjectionExec::try_new(exprs, plan)?,
        ))
    }
}

impl HiveFormat {
    /// Whether a file may be split into byte ranges read by different tasks.
    fn splittable(&self) -> bool {
        matches!(self, Self::Parquet)
    }
}

/// The filters on partition keys as a Glue `GetPartitions` expression, where each has an
/// exact equivalent: a string or integer key compared with a literal of its type (`=`,
/// `<>`, `<`, `<=`, `>`, `>=`, `IN`, `BETWEEN`), and `AND`/`OR` of those (no `NOT`, which
/// not every Glue implementation parses). Anything else is left out (conjunct by
/// conjunct), which only selects more partitions; the rows are filtered again after the
/// scan.
fn partition_expression(keys: &[Field], filters: &[Expr]) -> Option<String> {
    let parts: Vec<String> = filters
        .iter()
        .flat_map(split_conjunction)
        .filter_map(|e| glue_expr(keys, e))
        .collect();
    (!parts.is_empty()).then(|| parts.join(" AND "))
}

fn glue_expr(keys: &[Field], expr: &Expr) -> Option<String> {
    match expr {
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => match op {
            Operator::And | Operator::Or => Some(format!(
                "({} {} {})",
                glue_expr(keys, left)?,
                if *op == Operator::And { "AND" } else { "OR" },
                glue_expr(keys, right)?
            )),
            Operator::Eq
            | Operator::NotEq
            | Operator::Lt
            | Operator::LtEq
            | Operator::Gt
            | Operator::GtEq => {
                let (key, value, op) = match (key_of(keys, left), key_of(keys, right)) {
                    (Some(k), None) => (k, literal(k, right)?, *op),
                    (None, Some(k)) => (k, literal(k, left)?, op.swap()?),
                    _ => return None,
                };
                Some(format!("{} {op} {value}", key.name()))
            }
            _ => None,
        },
        Expr::InList(list) if !list.negated && !list.list.is_empty() && list.list.len() <= 100 => {
            let key = key_of(keys, &list.expr)?;
            let values = list
                .list
                .iter()
                .map(|v| literal(key, v))
                .collect::<Option<Vec<_>>>()?;
            Some(format!("({} IN ({}))", key.name(), values.join(", ")))
        }
        Expr::Between(b) if !b.negated => {
            let key = key_of(keys, &b.expr)?;
            Some(format!(
                "({} BETWEEN {} AND {})",
                key.name(),
                literal(key, &b.low)?,
                literal(key, &b.high)?
            ))
        }
        _ => None,
    }
}

/// The partition key `expr` is (a plain column reference), if it is one whose values
/// Glue compares as lambdafusion does: strings and integers.
fn key_of<'a>(keys: &'a [Field], expr: &Expr) -> Option<&'a Field> {
    let Expr::Column(c) = expr else { return None };
    keys.iter().find(|k| {
        k.name() == &c.name
            && matches!(
                k.data_type(),
                DataType::Utf8
                    | DataType::Int8
                    | DataType::Int16
                    | DataType::Int32
                    | DataType::Int64
            )
    })
}

/// A literal of the key's own type, written as Glue's expressions read it.
fn literal(key: &Field, expr: &Expr) -> Option<String> {
    let Expr::Literal(value, _) = expr else {
        return None;
    };
    match (key.data_type(), value) {
        (DataType::Utf8, ScalarValue::Utf8(Some(s))) => {
            Some(format!("'{}'", s.replace('\'', "''")))
        }
        (DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64, v)
            if v.data_type().is_integer() && !v.is_null() =>
        {
            Some(v.to_string())
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::{col, lit};

    #[test]
    fn delimiters_read_as_hive_writes_them() {
        assert_eq!(single_byte("|"), Some(b'|'));
        assert_eq!(single_byte("\\t"), Some(b'\t'));
        assert_eq!(single_byte("\\001"), Some(1));
        assert_eq!(single_byte("1"), Some(1));
        assert_eq!(single_byte("ab"), None);
        assert_eq!(single_byte(""), None);
    }

    #[test]
    fn only_exact_partition_filters_reach_glue() {
        let keys = vec![
            Field::new("region", DataType::Utf8, true),
            Field::new("year", DataType::Int32, true),
            Field::new("day", DataType::Date32, true),
        ];
        let expr = |filters: Vec<Expr>| partition_expression(&keys, &filters);
        assert_eq!(
            expr(vec![
                col("region").eq(lit("eu")),
                col("year").gt_eq(lit(2024))
            ]),
            Some("region = 'eu' AND year >= 2024".into())
        );
        assert_eq!(
            expr(vec![lit(2024).lt(col("year"))]),
            Some("year > 2024".into())
        );
        assert_eq!(
            expr(vec![col("region").eq(lit("it's"))]),
            Some("region = 'it''s'".into())
        );
        assert_eq!(
            expr(vec![
                col("region")
                    .eq(lit("eu"))
                    .or(col("region").in_list(vec![lit("us"), lit("ap")], false))
            ]),
            Some("(region = 'eu' OR (region IN ('us', 'ap')))".into())
        );
        // A data column, a date key, a type mismatch, a function: nothing reaches Glue.
        assert_eq!(expr(vec![col("amount").gt(lit(5))]), None);
        assert_eq!(expr(vec![col("day").gt(lit("2024-01-01"))]), None);
        assert_eq!(expr(vec![col("year").eq(lit("2024"))]), None);
        assert_eq!(
            expr(vec![col("region")
                .eq(lit("eu"))
                .or(col("amount").gt(lit(1)))]),
            None,
            "an OR with a part Glue cannot check keeps every partition"
        );
    }
}
