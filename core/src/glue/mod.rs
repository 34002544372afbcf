//! Tables of the AWS Glue Data Catalog, read where they are: `glue.<database>.<table>`.
//!
//! A deployment attaches Glue databases (`LAMBDAFUSION_GLUE_DATABASES`; embedded,
//! `--glue-database`). Each becomes a schema of the catalog `glue`, listed by `SHOW
//! TABLES` and `information_schema`, and, when one is the default database, its tables
//! are also found unqualified (after the tables declared with SQL). Glue's metadata
//! decides how a table is read:
//!
//! - `table_type = DELTA` (or Spark's `spark.sql.sources.provider = delta`): the Delta
//!   table at its location ([`crate::delta`]);
//! - `table_type = ICEBERG`: the Iceberg table whose metadata `metadata_location` names
//!   ([`crate::iceberg`]);
//! - otherwise a Hive table whose SerDe names the format: Parquet, CSV
//!   (`LazySimpleSerDe` with `field.delim`, `OpenCSVSerde` with `separatorChar` /
//!   `quoteChar` / `escapeChar`, `skip.header.line.count` 0 or 1), JSON (the OpenX and
//!   Hive JSON SerDes). Compression follows the files' extension, as in Athena.
//!
//! A partitioned Hive table's partitions come from Glue, not from listing S3: the query's
//! filters on partition keys become a `GetPartitions` expression, and only the partitions
//! Glue returns are listed. Partition values come from Glue, so a partition may live
//! anywhere its location says — but every location, the table's and each partition's, must
//! pass the data-location allow-list like any table's. This module decides; the Glue calls
//! themselves are behind [`GlueClient`] (`lambdafusion-aws` implements it with
//! `aws-sdk-glue`).

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::catalog::{CatalogProvider, SchemaProvider, Session, TableProvider};
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::SessionState;
use datafusion::logical_expr::{Expr, TableType};
use datafusion::physical_plan::ExecutionPlan;

use crate::access::AccessPolicy;
use crate::{Error, Result};

mod hive;
mod types;

pub use types::hive_type;

/// The catalog name Glue databases appear under (`glue.sales.orders`).
pub const CATALOG: &str = "glue";

/// Most partitions one query may read of one table; past it the query is refused and
/// asked to filter on the partition keys.
pub const MAX_PARTITIONS: usize = 100_000;

/// A table as Glue's `GetTable` describes it (the parts lambdafusion reads).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GlueTable {
    /// Its database.
    pub database: String,
    /// Its name.
    pub name: String,
    /// `EXTERNAL_TABLE`, `MANAGED_TABLE`, `VIRTUAL_VIEW`, ...
    pub table_type: Option<String>,
    /// The table's parameters (`table_type`, `classification`,
    /// `skip.header.line.count`, `metadata_location`, ...).
    pub parameters: HashMap<String, String>,
    /// The storage descriptor's location.
    pub location: Option<String>,
    /// The storage descriptor's input format class.
    pub input_format: Option<String>,
    /// The SerDe's class.
    pub serde: Option<String>,
    /// The SerDe's parameters (`field.delim`, `separatorChar`, `path`, ...).
    pub serde_parameters: HashMap<String, String>,
    /// The data columns, in order.
    pub columns: Vec<GlueColumn>,
    /// The partition keys, in order.
    pub partition_keys: Vec<GlueColumn>,
}

/// A column of a Glue table: its name and its Hive type (`bigint`, `decimal(10,2)`,
/// `array<struct<a:int>>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GlueColumn {
    /// Its name.
    pub name: String,
    /// Its Hive type, as Glue stores it.
    pub type_name: String,
}

/// One partition of a table: its values (one per partition key) and its location.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GluePartition {
    /// The values, in the order of the table's partition keys.
    pub values: Vec<String>,
    /// Where its files are; `None` when Glue has none (the partition is skipped).
    pub location: Option<String>,
}

/// The Glue calls the catalog makes. Errors are ours already: a denied call is
/// [`Error::Forbidden`] naming the action and the resource.
#[async_trait]
pub trait GlueClient: fmt::Debug + Send + Sync {
    /// The names of every table of `database` (`GetTables`, every page).
    async fn table_names(&self, database: &str) -> Result<Vec<String>>;
    /// The table `database.name` (`GetTable`); `None` when Glue has no such table.
    async fn table(&self, database: &str, name: &str) -> Result<Option<GlueTable>>;
    /// The partitions of `database.table` that `expression` selects (`GetPartitions`,
    /// every page; Glue's expression syntax); all of them without one.
    async fn partitions(
        &self,
        database: &str,
        table: &str,
        expression: Option<&str>,
    ) -> Result<Vec<GluePartition>>;
}

/// The Glue databases a deployment attached, and the client that reads them.
#[derive(Debug, Clone)]
pub struct Glue {
    /// Reads the catalog.
    pub client: Arc<dyn GlueClient>,
    /// The attached databases: only these are ever read.
    pub databases: Vec<String>,
    /// The database whose tables are also found unqualified, if any (one of
    /// [`Glue::databases`]).
    pub default_database: Option<String>,
}

impl Glue {
    /// Checks the settings: database names as Glue allows them, the default among them.
    pub fn new(
        client: Arc<dyn GlueClient>,
        databases: Vec<String>,
        default_database: Option<String>,
    ) -> Result<Self> {
        for name in &databases {
            let valid = !name.is_empty()
                && name.len() <= 255
                && name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
            if !valid {
                return Err(Error::InvalidInput(format!(
                    "{name:?} is not a Glue database name lambdafusion can attach (lower-case \
                     letters, digits and _, as Glue stores names)"
                )));
            }
        }
        if let Some(default) = &default_database {
            if !databases.contains(default) {
                return Err(Error::InvalidInput(format!(
                    "the default Glue database {default} is not one of the attached databases \
                     ({})",
                    databases.join(", ")
                )));
            }
        }
        Ok(Self {
            client,
            databases,
            default_database,
        })
    }
}

/// Registers the catalog `glue` in `state`, one schema per attached database. With
/// `list`, each database's table names are read now (for `SHOW TABLES` and
/// `information_schema`, which ask synchronously); without, tables are found only by
/// name, one `GetTable` each, which is all a query needs.
pub async fn install(
    state: &SessionState,
    table_state: &SessionState,
    glue: &Glue,
    access: &AccessPolicy,
    list: bool,
) -> Result<Option<Arc<GlueSchema>>> {
    let mut schemas = BTreeMap::new();
    let names = futures::future::try_join_all(glue.databases.iter().map(|db| async move {
        if list {
            glue.client.table_names(db).await
        } else {
            Ok(Vec::new())
        }
    }))
    .await?;
    for (database, names) in glue.databases.iter().zip(names) {
        schemas.insert(
            database.clone(),
            Arc::new(GlueSchema {
                database: database.clone(),
                client: glue.client.clone(),
                names,
                state: table_state.clone(),
                access: access.clone(),
            }),
        );
    }
    let default = glue
        .default_database
        .as_ref()
        .and_then(|d| schemas.get(d).cloned());
    state
        .catalog_list()
        .register_catalog(CATALOG.to_string(), Arc::new(GlueCatalog { schemas }));
    Ok(default)
}

/// The catalog `glue`: one schema per attached database.
#[derive(Debug)]
struct GlueCatalog {
    schemas: BTreeMap<String, Arc<GlueSchema>>,
}

impl CatalogProvider for GlueCatalog {
    fn schema_names(&self) -> Vec<String> {
        self.schemas.keys().cloned().collect()
    }

    fn schema(&self, name: &str) -> Option<Arc<dyn SchemaProvider>> {
        self.schemas
            .get(name)
            .map(|s| s.clone() as Arc<dyn SchemaProvider>)
    }

    fn register_schema(
        &self,
        name: &str,
        _schema: Arc<dyn SchemaProvider>,
    ) -> DfResult<Option<Arc<dyn SchemaProvider>>> {
        Err(DataFusionError::Plan(format!(
            "cannot create schema {CATALOG}.{name}: Glue databases are attached by the \
             deployment (LAMBDAFUSION_GLUE_DATABASES), not created with SQL"
        )))
    }
}

/// One attached Glue database as a DataFusion schema.
pub struct GlueSchema {
    database: String,
    client: Arc<dyn GlueClient>,
    /// Read at install when the statement lists tables; empty otherwise.
    names: Vec<String>,
    /// Used to open Delta tables (object stores).
    state: SessionState,
    access: AccessPolicy,
}

impl fmt::Debug for GlueSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GlueSchema")
            .field("database", &self.database)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl SchemaProvider for GlueSchema {
    fn table_names(&self) -> Vec<String> {
        self.names.clone()
    }

    async fn table(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        // Glue stores names in lower case; DataFusion has already normalized unquoted ones.
        let Some(table) = self
            .client
            .table(&self.database, &name.to_ascii_lowercase())
            .await
            .map_err(|e| DataFusionError::External(Box::new(e)))?
        else {
            return Ok(None);
        };
        let declared = declared_schema(&table);
        match provider(&self.state, &self.access, self.client.clone(), table).await {
            Ok(provider) => Ok(Some(provider)),
            // Listed and described like any table, refused when read: one unreadable
            // table must not break `SHOW TABLES` or `information_schema` for the others.
            Err(e) => Ok(Some(Arc::new(Unreadable {
                schema: declared,
                user: matches!(e, DataFusionError::Plan(_)),
                why: e.strip_backtrace().to_string(),
            }))),
        }
    }

    fn table_exist(&self, name: &str) -> bool {
        self.names.iter().any(|n| n == name)
    }
}

/// The columns Glue declares, typed where lambdafusion reads the type (null otherwise).
fn declared_schema(table: &GlueTable) -> SchemaRef {
    let fields: Vec<Field> = table
        .columns
        .iter()
        .chain(&table.partition_keys)
        .map(|c| {
            let data_type = hive_type(&c.type_name).unwrap_or(DataType::Null);
            Field::new(c.name.to_ascii_lowercase(), data_type, true)
        })
        .collect();
    Arc::new(Schema::new(fields))
}

/// A Glue table lambdafusion cannot read: its declared columns, and the reason, given
/// when a query reads it.
#[derive(Debug)]
struct Unreadable {
    schema: SchemaRef,
    /// Whether the table is at fault (400), or reaching it failed (storage, 5xx).
    user: bool,
    why: String,
}

#[async_trait]
impl TableProvider for Unreadable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        _projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        Err(match self.user {
            true => DataFusionError::Plan(self.why.clone()),
            false => DataFusionError::Execution(self.why.clone()),
        })
    }
}

/// A refusal naming the Glue table and the reason (400).
fn refuse(table: &GlueTable, why: impl fmt::Display) -> DataFusionError {
    DataFusionError::Plan(format!(
        "Glue table {}.{} cannot be read: {why}",
        table.database, table.name
    ))
}

/// The table provider Glue's metadata calls for (see the [module docs](self)).
pub async fn provider(
    state: &SessionState,
    access: &AccessPolicy,
    client: Arc<dyn GlueClient>,
    table: GlueTable,
) -> DfResult<Arc<dyn TableProvider>> {
    let param = |key: &str| {
        table
            .parameters
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| v.as_str())
    };
    if table
        .table_type
        .as_deref()
        .is_some_and(|t| t.eq_ignore_ascii_case("VIRTUAL_VIEW"))
    {
        return Err(refuse(
            &table,
            "it is a view, and Glue views are not supported",
        ));
    }
    if param("table_type").is_some_and(|t| t.eq_ignore_ascii_case("ICEBERG")) {
        // The catalog's pointer to the current metadata file is the table's version.
        let metadata = param("metadata_location")
            .ok_or_else(|| refuse(&table, "it is an Iceberg table without metadata_location"))?;
        access
            .check_location(metadata)
            .map_err(|e| refuse(&table, e))?;
        let label = format!("{CATALOG}.{}.{}", table.database, table.name);
        return crate::iceberg::open(
            state.runtime_env(),
            metadata,
            crate::delta::Version::Latest,
            Some(&label),
        )
        .await
        .map(|t| t as Arc<dyn TableProvider>);
    }
    let delta = param("table_type").is_some_and(|t| t.eq_ignore_ascii_case("DELTA"))
        || param("spark.sql.sources.provider").is_some_and(|p| p.eq_ignore_ascii_case("delta"));
    if delta {
        // Spark keeps a placeholder location and the real one in the SerDe's `path`.
        let location = table
            .serde_parameters
            .get("path")
            .or(table.location.as_ref())
            .ok_or_else(|| refuse(&table, "it has no location"))?;
        access
            .check_location(location)
            .map_err(|e| refuse(&table, e))?;
        let label = format!("{CATALOG}.{}.{}", table.database, table.name);
        return crate::delta::open(
            state.runtime_env(),
            location,
            crate::delta::Version::Latest,
            Some(&label),
        )
        .await
        .map(|t| t as Arc<dyn TableProvider>);
    }
    hive::table(access, client, table)
}
