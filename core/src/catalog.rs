//! The table catalog: external tables created with `CREATE EXTERNAL TABLE` and views
//! created with `CREATE VIEW`, kept in the job store (schema resolved once, at creation)
//! and served to DataFusion through a schema provider that builds a table only when a
//! query names it. A view is stored as its statement and planned again, through this
//! catalog and the caller's access policy, each time a query reads it; DataFusion then
//! inlines its plan, so the stages and tasks see only the tables under it.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::catalog::view::ViewTable;
use datafusion::catalog::{SchemaProvider, TableProvider};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{DFSchema, TableReference};
use datafusion::datasource::listing::ListingTableUrl;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::{SessionState, SessionStateBuilder};
use datafusion::logical_expr::{CreateExternalTable, CreateView, DdlStatement, LogicalPlan};

use crate::access::AccessPolicy;
use crate::plan::{decode_schema, encode_schema};
use crate::state::{JobStore, TableRecord};
use crate::time::now_ms;
use crate::{Error, Result, Services};

/// The `format` of a view's catalog entry.
pub const VIEW_FORMAT: &str = "VIEW";

/// Most views one query may read through one another (a view reading a view ...); past
/// it the query is refused — also what stops a view that reads itself, which `CREATE OR
/// REPLACE VIEW` can make.
pub const MAX_VIEW_DEPTH: usize = 16;

/// Schema provider over a snapshot of the catalog (one store query per session).
#[derive(Debug, Clone)]
pub struct CatalogSchema {
    tables: Arc<BTreeMap<String, TableRecord>>,
    /// Used only to create table providers (file format factories, object stores).
    state: SessionState,
    /// Checked again at every query: a table created under an older policy is refused.
    access: AccessPolicy,
    /// The default Glue database, searched for names no declared table has.
    glue_default: Option<Arc<crate::glue::GlueSchema>>,
    /// Views being expanded around this provider (0 for a query's own).
    depth: usize,
}

impl CatalogSchema {
    /// Loads the catalog from `store`.
    pub async fn load(
        store: &dyn JobStore,
        state: SessionState,
        access: AccessPolicy,
    ) -> Result<Self> {
        let tables = store
            .list_tables()
            .await?
            .into_iter()
            .map(|t| (t.name.clone(), t))
            .collect();
        Ok(Self {
            tables: Arc::new(tables),
            state,
            access,
            glue_default: None,
            depth: 0,
        })
    }

    /// The plan of the view `record`: its statement planned again over this catalog one
    /// level deeper (each table it reads checked against the access policy as a query's
    /// own would be).
    async fn view(&self, record: &TableRecord) -> DfResult<Arc<dyn TableProvider>> {
        if self.depth >= MAX_VIEW_DEPTH {
            return Err(DataFusionError::Plan(format!(
                "view {} is read through more than {MAX_VIEW_DEPTH} views: does a view read \
                 itself (CREATE OR REPLACE VIEW can make one)? Replace one of them",
                record.name
            )));
        }
        let state = fresh_state(&self.state);
        let inner = CatalogSchema {
            depth: self.depth + 1,
            ..self.clone()
        };
        let options = state.config().options().catalog.clone();
        state
            .catalog_list()
            .catalog(&options.default_catalog)
            .ok_or_else(|| DataFusionError::Internal("default catalog missing".into()))?
            .register_schema(&options.default_schema, Arc::new(inner))?;
        let plan = Box::pin(state.create_logical_plan(&record.ddl)).await?;
        let LogicalPlan::Ddl(DdlStatement::CreateView(view)) = plan else {
            return Err(DataFusionError::Internal(format!(
                "catalog entry {} does not hold a CREATE VIEW statement",
                record.name
            )));
        };
        // Only its schema as created: columns the tables under it gained since are not
        // the view's.
        let stored = decode_schema(&record.schema).map_err(DataFusionError::from)?;
        if view.input.schema().as_arrow().fields() != stored.fields() {
            return Err(DataFusionError::Plan(format!(
                "view {} no longer reads what it was created over: the tables under it \
                 changed ({} now, {} then); create it again",
                record.name,
                view.input.schema().as_arrow(),
                stored
            )));
        }
        Ok(Arc::new(ViewTable::new(
            view.input.as_ref().clone(),
            view.definition.clone(),
        )))
    }
}

/// A session state like `state` (its settings, runtime, table formats) with a catalog
/// list of its own, to plan a catalog entry's statement in.
fn fresh_state(state: &SessionState) -> SessionState {
    let mut own = SessionStateBuilder::new()
        .with_config(state.config().clone())
        .with_runtime_env(state.runtime_env().clone())
        .with_default_features()
        .build();
    crate::delta::register(&mut own);
    crate::iceberg::register(&mut own);
    own
}

#[async_trait]
impl SchemaProvider for CatalogSchema {
    fn table_names(&self) -> Vec<String> {
        self.tables.keys().cloned().collect()
    }

    async fn table(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        let (name, version) = match crate::delta::parse_versioned_name(name) {
            Some((table, version)) => (table, version),
            None => (name, crate::delta::Version::Latest),
        };
        match self.tables.get(name) {
            Some(record) if record.format == VIEW_FORMAT => {
                if version != crate::delta::Version::Latest {
                    return Err(DataFusionError::Plan(format!(
                        "{name} is a view: VERSION AS OF and TIMESTAMP AS OF read Delta and \
                         Iceberg tables only"
                    )));
                }
                self.view(record).await.map(Some)
            }
            Some(record) => {
                for location in &record.locations {
                    self.access.check_location(location).map_err(|e| {
                        DataFusionError::Plan(format!("table {name} cannot be read: {e}"))
                    })?;
                }
                let versioned = [crate::delta::FORMAT, crate::iceberg::FORMAT];
                if version != crate::delta::Version::Latest
                    && !versioned.contains(&record.format.as_str())
                {
                    return Err(DataFusionError::Plan(format!(
                        "table {name} is a {} table: VERSION AS OF and TIMESTAMP AS OF read \
                         Delta and Iceberg tables only",
                        record.format
                    )));
                }
                Ok(Some(table_provider_at(&self.state, record, version).await?))
            }
            None => match &self.glue_default {
                Some(glue) if version == crate::delta::Version::Latest => glue.table(name).await,
                _ => Ok(None),
            },
        }
    }

    fn table_exist(&self, name: &str) -> bool {
        let name = crate::delta::parse_versioned_name(name).map_or(name, |(table, _)| table);
        self.tables.contains_key(name)
    }
}

/// Whether a statement may list the catalog's tables (`SHOW TABLES`, `information_schema`):
/// only then are the attached Glue databases' table names read before planning.
pub fn lists_tables(sql: &str) -> bool {
    let lower = sql.to_ascii_lowercase();
    lower.contains("information_schema") || lower.contains("show")
}

/// Installs the catalog of the services' store as the default schema of `state`, and the
/// attached Glue databases as the catalog `glue` ([`crate::glue`]); with `list`, their
/// table names are read now ([`lists_tables`]).
pub async fn install(state: &SessionState, services: &Services, list: bool) -> Result<()> {
    // A separate state: resolving tables through the catalog being installed would
    // make the catalog's own DDL planning look itself up.
    let own = fresh_state(state);
    let access = &services.config.access;
    let glue_default = match &services.glue {
        Some(glue) => crate::glue::install(state, &own, glue, access, list).await?,
        None => None,
    };
    let mut schema = CatalogSchema::load(services.store.as_ref(), own, access.clone()).await?;
    schema.glue_default = glue_default;
    let options = &state.config().options().catalog;
    let catalog = state
        .catalog_list()
        .catalog(&options.default_catalog)
        .ok_or_else(|| Error::Internal("default catalog missing".into()))?;
    catalog.register_schema(&options.default_schema, Arc::new(schema))?;
    Ok(())
}

/// The table provider of a stored table, with its stored schema (no inference); a Delta
/// table at its latest version.
pub async fn table_provider(
    state: &SessionState,
    record: &TableRecord,
) -> DfResult<Arc<dyn TableProvider>> {
    table_provider_at(state, record, crate::delta::Version::Latest).await
}

/// The table provider of a stored table; a Delta table at `version` (its log, not the
/// stored schema, decides its columns: the table may have evolved since it was created).
pub async fn table_provider_at(
    state: &SessionState,
    record: &TableRecord,
    version: crate::delta::Version,
) -> DfResult<Arc<dyn TableProvider>> {
    if record.format == crate::iceberg::FORMAT {
        let [location] = record.locations.as_slice() else {
            return Err(DataFusionError::Internal(format!(
                "Iceberg table {} has {} locations",
                record.name,
                record.locations.len()
            )));
        };
        let table =
            crate::iceberg::open(state.runtime_env(), location, version, Some(&record.name))
                .await?;
        return Ok(table);
    }
    if record.format == crate::delta::FORMAT {
        let [location] = record.locations.as_slice() else {
            return Err(DataFusionError::Internal(format!(
                "Delta table {} has {} locations",
                record.name,
                record.locations.len()
            )));
        };
        let table =
            crate::delta::open(state.runtime_env(), location, version, Some(&record.name)).await?;
        return Ok(table);
    }
    let plan = state.create_logical_plan(&record.ddl).await?;
    let LogicalPlan::Ddl(DdlStatement::CreateExternalTable(cmd)) = plan else {
        return Err(DataFusionError::Internal(format!(
            "catalog entry {} does not hold a CREATE EXTERNAL TABLE statement",
            record.name
        )));
    };
    let schema = decode_schema(&record.schema).map_err(DataFusionError::from)?;
    let table_partition_cols = if record.partition_columns.is_empty() {
        cmd.table_partition_cols.clone()
    } else {
        record.partition_columns.clone()
    };
    let cmd = CreateExternalTable {
        schema: Arc::new(DFSchema::try_from(schema.as_ref().clone())?),
        locations: record.locations.clone(),
        table_partition_cols,
        ..*cmd
    };
    create_provider(state, &cmd).await
}

async fn create_provider(
    state: &SessionState,
    cmd: &CreateExternalTable,
) -> DfResult<Arc<dyn TableProvider>> {
    let factory = state
        .table_factories()
        .get(cmd.file_type.as_str())
        .ok_or_else(|| {
            DataFusionError::Plan(format!(
                "unsupported file format {} (supported: PARQUET, CSV, JSON, ARROW, DELTA)",
                cmd.file_type
            ))
        })?;
    factory.create(state, cmd).await
}

/// Table name of a DDL reference, refusing qualified names outside the default schema.
pub(crate) fn table_name(name: &TableReference) -> Result<String> {
    match name {
        // `@` names a version of a table in a query (`t@v3`, see `crate::sql::parse`).
        TableReference::Bare { table } if table.contains('@') => Err(Error::InvalidInput(format!(
            "table {table}: a table name may not contain @"
        ))),
        TableReference::Bare { table } if table.trim().is_empty() => Err(Error::InvalidInput(
            "a table or view name may not be empty".into(),
        )),
        // Glue's and Athena's limit; DynamoDB keys hold at most 1 KB of sort key.
        TableReference::Bare { table } if table.len() > MAX_NAME_BYTES => {
            Err(Error::InvalidInput(format!(
                "table {}...: a table or view name is at most {MAX_NAME_BYTES} bytes, not {}",
                table.chars().take(32).collect::<String>(),
                table.len()
            )))
        }
        TableReference::Bare { table } if table.chars().any(char::is_control) => Err(
            Error::InvalidInput("a table or view name may not hold control characters".into()),
        ),
        TableReference::Bare { table } => Ok(table.to_string()),
        other => Err(Error::InvalidInput(format!(
            "table {other}: only unqualified table names are supported"
        ))),
    }
}

/// Longest table or view name, in bytes.
pub const MAX_NAME_BYTES: usize = 255;

/// A location as the catalog stores it: the URL DataFusion resolves it to — or, for a
/// local path with a glob (`/data/public_*.csv`), the path itself, so that the glob is
/// applied again at every query and the table never reads more than was named. Globs
/// in URLs are refused: DataFusion would read them as literal object names.
pub(crate) fn stored_location(location: &str) -> Result<String> {
    let url = ListingTableUrl::parse(location).map_err(|e| {
        Error::InvalidInput(format!(
            "{location} is not a valid location: {}",
            e.strip_backtrace()
        ))
    })?;
    if url.get_glob().is_some() {
        return Ok(location.trim().to_string());
    }
    if location.contains("://") && location.contains(['*', '?', '[']) {
        return Err(Error::InvalidInput(format!(
            "{location}: glob patterns (* ? [) are supported in local paths only; for an \
             object store, name the prefix (a directory) that holds exactly the table's files"
        )));
    }
    Ok(url.as_str().to_string())
}

/// Creates (or replaces) a catalog table: checks its locations against the access
/// policy, resolves its schema now and stores both. Returns the stored record, or `None`
/// when `IF NOT EXISTS` found one. Nothing is stored when a check fails.
///
/// Long because every check happens before anything is stored, in the order a reader
/// expects them (location, glob, format, schema).
pub async fn create_table(
    state: &SessionState,
    store: &dyn JobStore,
    access: &AccessPolicy,
    cmd: &CreateExternalTable,
    sql: &str,
) -> Result<Option<TableRecord>> {
    let name = table_name(&cmd.name)?;
    if let Some(existing) = store.get_table(&name).await? {
        if cmd.if_not_exists {
            return Ok(None);
        }
        if existing.format == VIEW_FORMAT {
            return Err(Error::InvalidInput(format!(
                "{name} is a view: a table cannot replace it (DROP VIEW {name} first)"
            )));
        }
        if !cmd.or_replace {
            return Err(Error::InvalidInput(format!(
                "table {name} already exists (use CREATE OR REPLACE EXTERNAL TABLE, or DROP TABLE first)"
            )));
        }
    }
    if cmd.temporary {
        return Err(Error::InvalidInput(
            "temporary tables are not supported".into(),
        ));
    }
    if cmd.unbounded {
        return Err(Error::InvalidInput(
            "unbounded (streaming) tables are not supported: a query's tasks read a fixed \
             set of files"
                .into(),
        ));
    }
    let locations = cmd
        .locations
        .iter()
        .map(|l| stored_location(l))
        .collect::<Result<Vec<_>>>()?;
    for location in &locations {
        access.check_location(location)?;
    }
    let cmd = CreateExternalTable {
        locations: locations.clone(),
        ..cmd.clone()
    };
    // What the files say decides the schema: files that are not of the named format are
    // the statement's fault.
    let provider =
        create_provider(state, &cmd)
            .await
            .map_err(|e| match Error::DataFusion(e).planning() {
                Error::InvalidInput(why) => Error::InvalidInput(format!(
                    "cannot read {} as {} for table {name}: {why}",
                    locations.join(", "),
                    cmd.file_type.to_uppercase()
                )),
                other => other,
            })?;
    if let Some(listing) = provider.downcast_ref::<datafusion::datasource::listing::ListingTable>()
    {
        let json = listing
            .options()
            .format
            .downcast_ref::<datafusion::datasource::file_format::json::JsonFormat>();
        if json.is_some_and(|j| !j.is_newline_delimited()) {
            // A task rebuilds its scan from the encoded plan, which does not carry the
            // JSON mode: it would read an array file as lines.
            return Err(Error::InvalidInput(format!(
                "table {name}: JSON array files ('format.newline_delimited' 'false') are not \
                 supported; store the rows as newline-delimited JSON (one object per line)"
            )));
        }
    }
    let schema = provider.schema();
    // Partition columns found in the directory names (not declared) are kept, so the
    // table is built again with them as partitions, not as file columns.
    let partition_columns: Vec<String> = provider
        .downcast_ref::<datafusion::datasource::listing::ListingTable>()
        .map(|t| {
            t.options()
                .table_partition_cols
                .iter()
                .map(|(name, _)| name.clone())
                .collect()
        })
        .unwrap_or_default();
    if schema.fields().is_empty() {
        return Err(Error::InvalidInput(format!(
            "no columns found for table {name} at {}: is the location empty?",
            locations.join(", ")
        )));
    }
    let record = TableRecord {
        name: name.clone(),
        ddl: sql.to_string(),
        locations,
        format: cmd.file_type.to_uppercase(),
        schema: encode_schema(&schema)?,
        partition_columns,
        created_ms: now_ms(),
    };
    if !store.put_table(&record, cmd.or_replace).await? {
        return Err(Error::InvalidInput(format!("table {name} already exists")));
    }
    Ok(Some(record))
}

/// Drops a catalog table (`view: false`) or view (`view: true`); the other kind of
/// entry under the name is refused, naming the statement that drops it.
pub async fn drop_table(
    store: &dyn JobStore,
    name: &TableReference,
    if_exists: bool,
    view: bool,
) -> Result<bool> {
    let name = table_name(name)?;
    let kind = if view { "view" } else { "table" };
    if let Some(record) = store.get_table(&name).await? {
        if (record.format == VIEW_FORMAT) != view {
            return Err(Error::InvalidInput(if view {
                format!("{name} is a table, not a view: DROP TABLE {name}")
            } else {
                format!("{name} is a view, not a table: DROP VIEW {name}")
            }));
        }
    }
    let existed = store.delete_table(&name).await?;
    if !existed && !if_exists {
        return Err(Error::InvalidInput(format!("{kind} {name} does not exist")));
    }
    Ok(existed)
}

/// Creates (or replaces) a view: its statement and the schema of its rows are stored, to
/// be planned again at every query that reads it. The query under it must only read:
/// tables and views of this catalog (unqualified names), no `information_schema`, no
/// writes. Returns the stored record.
pub async fn create_view(store: &dyn JobStore, cmd: &CreateView, sql: &str) -> Result<TableRecord> {
    let name = table_name(&cmd.name)?;
    if cmd.temporary {
        return Err(Error::InvalidInput(
            "temporary views are not supported: a view is part of the catalog".into(),
        ));
    }
    if let Some(existing) = store.get_table(&name).await? {
        if existing.format != VIEW_FORMAT {
            return Err(Error::InvalidInput(format!(
                "{name} is a table: a view cannot replace it (DROP TABLE {name} first)"
            )));
        }
        if !cmd.or_replace {
            return Err(Error::InvalidInput(format!(
                "view {name} already exists (use CREATE OR REPLACE VIEW, or DROP VIEW first)"
            )));
        }
    }
    crate::sql::read_only_view(&cmd.input)?;
    let mut qualified = None;
    cmd.input.apply_with_subqueries(|node| {
        if let LogicalPlan::TableScan(scan) = node {
            if !matches!(scan.table_name, TableReference::Bare { .. }) {
                qualified = Some(scan.table_name.to_string());
                return Ok(TreeNodeRecursion::Stop);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    if let Some(table) = qualified {
        return Err(Error::InvalidInput(format!(
            "view {name} reads {table}: a view reads the catalog's own tables and views, by \
             unqualified name"
        )));
    }
    let schema = cmd.input.schema().as_arrow().clone();
    let record = TableRecord {
        name: name.clone(),
        ddl: sql.to_string(),
        locations: Vec::new(),
        format: VIEW_FORMAT.into(),
        schema: encode_schema(&schema)?,
        partition_columns: Vec::new(),
        created_ms: now_ms(),
    };
    if !store.put_table(&record, cmd.or_replace).await? {
        return Err(Error::InvalidInput(format!("view {name} already exists")));
    }
    Ok(record)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_refused_empty_too_long_or_with_control_characters() {
        let bare = |t: &str| TableReference::bare(t.to_string());
        assert_eq!(table_name(&bare("a#b")).unwrap(), "a#b");
        assert_eq!(table_name(&bare(&"v".repeat(255))).unwrap().len(), 255);
        for (name, says) in [
            ("", "may not be empty"),
            ("  ", "may not be empty"),
            (&*"v".repeat(256), "at most 255 bytes, not 256"),
            ("a\nb", "control characters"),
            ("t@v1", "may not contain @"),
        ] {
            let e = table_name(&bare(name)).unwrap_err().to_string();
            assert!(e.contains(says), "{name:?}: {e}");
        }
        assert!(table_name(&TableReference::partial("s", "t")).is_err());
    }
}
