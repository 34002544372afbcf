//! Writes: `COPY (query) TO 'location'`, `CREATE TABLE name [WITH (...)] AS query` and
//! `INSERT INTO` a Delta or Iceberg table, run as a query whose final stage writes files
//! ([`sink::TableWriterExec`]), made visible by one commit ([`commit()`]: a manifest, or
//! the table format's own — [`delta`], [`iceberg`]); where they may go is [`target`]'s.
//!
//! - **Where**: only inside the write locations (`--allow-write`,
//!   `LAMBDAFUSION_WRITE_LOCATIONS`), never the engine's own locations, never a catalog
//!   table's location, and only to an empty location ([`check_target`]).
//! - **Distributed**: every task of the final stage writes its own files, in parallel
//!   (each piece of a spread task too); no task gathers the result.
//! - **Exactly once**: a task's files carry a name of its run, so two attempts never share
//!   a file; the task's completion record lists the files of the one attempt that
//!   committed. When every task has committed, the scheduler's [`commit()`] writes the
//!   manifest `_SUCCESS` (JSON: every file, its rows and bytes) and deletes every other
//!   file of the job it finds under the location (attempts that lost, crashed or were
//!   duplicated). A job that fails or is cancelled has every file of it deleted
//!   ([`discard`]). A reader that trusts `_SUCCESS` (as Spark's S3A committers' readers
//!   do) sees all of a write or nothing; one that lists the location sees files appear as
//!   tasks write them, until the commit or the clean-up (see docs/using.md). An attempt
//!   that died after the commit or the clean-up is found by the sweep's last clean-up
//!   ([`last_clean_up`]), once no attempt of the job can still be running.

pub mod commit;
pub mod delta;
pub mod iceberg;
pub mod sink;
mod stats;
pub mod target;

pub use commit::*;
pub use target::*;

use std::sync::Arc;

use datafusion::arrow::array::{RecordBatch, StringArray, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::datasource::listing::ListingTableUrl;
use datafusion::logical_expr::{cast, Expr, LogicalPlan, LogicalPlanBuilder};
use object_store::path::Path;
use object_store::ObjectStore;

use crate::{Error, Result, Services};

/// The manifest a commit writes at the root of the location.
pub const MANIFEST: &str = "_SUCCESS";

/// The object store of `location` and its path there.
pub(crate) fn store_of(
    services: &Services,
    location: &str,
) -> Result<(Arc<dyn ObjectStore>, Path)> {
    let url = ListingTableUrl::parse(location).map_err(Error::from)?;
    let store = services.runtime.object_store(&url).map_err(Error::from)?;
    Ok((store, url.prefix().clone()))
}

/// `input` with each column cast to `stored(its type)`, the type a table format stores
/// it as; the same plan when every column is of that type already.
pub fn cast_columns(input: LogicalPlan, stored: fn(&DataType) -> DataType) -> Result<LogicalPlan> {
    let schema = input.schema().clone();
    if schema
        .fields()
        .iter()
        .all(|f| stored(f.data_type()) == *f.data_type())
    {
        return Ok(input);
    }
    let columns: Vec<Expr> = schema
        .iter()
        .map(|(qualifier, field)| {
            let column = Expr::Column(datafusion::common::Column::from((qualifier, field)));
            let wanted = stored(field.data_type());
            if wanted == *field.data_type() {
                column
            } else {
                cast(column, wanted).alias(field.name())
            }
        })
        .collect();
    Ok(LogicalPlanBuilder::from(input).project(columns)?.build()?)
}

/// The schema of a write's result: one row saying what it wrote.
pub fn summary_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("count", DataType::UInt64, false),
        Field::new("files", DataType::UInt64, false),
        Field::new("bytes", DataType::UInt64, false),
        Field::new("location", DataType::Utf8, false),
    ]))
}

/// The one row of a write's result.
pub fn summary(target: &WriteTarget, files: &[WrittenFile]) -> Result<RecordBatch> {
    Ok(RecordBatch::try_new(
        summary_schema(),
        vec![
            Arc::new(UInt64Array::from(vec![files
                .iter()
                .map(|f| f.rows)
                .sum::<u64>()])),
            Arc::new(UInt64Array::from(vec![files.len() as u64])),
            Arc::new(UInt64Array::from(vec![files
                .iter()
                .map(|f| f.bytes)
                .sum::<u64>()])),
            Arc::new(StringArray::from(vec![target.location.clone()])),
        ],
    )?)
}
