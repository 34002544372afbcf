//! What `query` and `shell` share: a session on the embedded engine or on an endpoint,
//! statements split out of a script, and results written in the format asked for.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::sql::parser::DFParser;
use lambdafusion::status::JobStatus;
use lambdafusion_api::Tables;
use lambdafusion_embedded::Embedded;

use crate::error::CliError;
use crate::{client, display};

/// Where statements run.
pub enum Session {
    /// The engine in this process.
    Embedded(Arc<Embedded>),
    /// A `lambdafusion serve`, the local stack or a deployment.
    Remote(client::Client),
}

/// A statement's end: its status and its rows.
pub struct Outcome {
    /// The final status.
    pub status: JobStatus,
    /// Schema of the rows (also when there are none).
    pub schema: SchemaRef,
    /// The rows.
    pub batches: Vec<RecordBatch>,
}

impl Session {
    /// Runs one statement to its end, with a progress bar on a terminal. A statement
    /// that did not succeed is an error carrying its message.
    pub async fn run(&self, sql: &str, max_seconds: Option<f64>) -> Result<Outcome, CliError> {
        let bar = display::task_progress();
        let result = match self {
            Session::Remote(client) => client
                .run_with(sql, max_seconds, &mut |s| display::update_progress(&bar, s))
                .await
                .map_err(CliError::from),
            Session::Embedded(engine) => run_embedded(engine, sql, &bar).await,
        };
        bar.finish_and_clear();
        let (status, schema, batches) = result?;
        Ok(Outcome {
            status,
            schema,
            batches,
        })
    }

    /// The catalog.
    pub async fn tables(&self) -> Result<Tables, CliError> {
        match self {
            Session::Remote(client) => Ok(client.tables().await?),
            Session::Embedded(engine) => Ok(lambdafusion_api::catalog(engine.services()).await?),
        }
    }
}

async fn run_embedded(
    engine: &Embedded,
    sql: &str,
    bar: &indicatif::ProgressBar,
) -> Result<(JobStatus, SchemaRef, Vec<RecordBatch>), CliError> {
    let id = engine.submit(sql).await?;
    let every = Duration::from_millis(200);
    let output = engine
        .finish(&id, every, |s| display::update_progress(bar, s))
        .await?;
    Ok((output.status, output.schema, output.batches))
}

/// The statements of a script, in order. A script of one statement is sent as written
/// (comments and all); several are parsed apart and each sent as the parser prints it.
/// A script this parser cannot read is sent as written: the engine's parser (its dialect
/// reads `VERSION AS OF`, ...) answers for it, with its own hints.
pub fn split_statements(script: &str) -> Result<Vec<String>, CliError> {
    let Ok(statements) = DFParser::parse_sql(script) else {
        return Ok(vec![script.trim().trim_end_matches(';').trim().to_string()]);
    };
    match statements.len() {
        0 => Err("no SQL statement given (only comments or blanks)".into()),
        1 => Ok(vec![script.trim().trim_end_matches(';').trim().to_string()]),
        _ => Ok(statements.iter().map(|s| s.to_string()).collect()),
    }
}

/// How rows are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    /// An aligned text table.
    Table,
    /// CSV with a header line.
    Csv,
    /// One JSON object per line.
    Json,
    /// A Parquet file (needs --output, or a standard output that is not a terminal).
    Parquet,
}

/// Writes `batches` to `out` in `format`.
pub fn write_rows(
    format: OutputFormat,
    schema: &SchemaRef,
    batches: &[RecordBatch],
    out: &mut (dyn Write + Send),
) -> Result<(), CliError> {
    match format {
        OutputFormat::Table => Ok(writeln!(out, "{}", display::rows_table(schema, batches))?),
        OutputFormat::Csv => {
            let mut writer = datafusion::arrow::csv::WriterBuilder::new()
                .with_header(true)
                .build(out);
            if batches.is_empty() {
                writer.write(&RecordBatch::new_empty(schema.clone()))?;
            }
            for b in batches {
                writer.write(b)?;
            }
            Ok(())
        }
        OutputFormat::Json => {
            let mut writer = datafusion::arrow::json::LineDelimitedWriter::new(out);
            for b in batches {
                writer.write(b)?;
            }
            Ok(writer.finish()?)
        }
        OutputFormat::Parquet => {
            let mut writer =
                datafusion::parquet::arrow::ArrowWriter::try_new(out, schema.clone(), None)?;
            for b in batches {
                writer.write(b)?;
            }
            writer.close()?;
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_single_statement_is_sent_as_written() {
        let sql = "-- TPC-H Q6\nSELECT 1 -- one\n;\n";
        assert_eq!(
            split_statements(sql).unwrap(),
            vec!["-- TPC-H Q6\nSELECT 1 -- one"]
        );
    }

    #[test]
    fn a_script_splits_into_its_statements() {
        let sql = "CREATE VIEW v AS SELECT 1 AS x; -- then\nSELECT x FROM v;\nDROP VIEW v";
        let parts = split_statements(sql).unwrap();
        assert_eq!(parts.len(), 3, "{parts:?}");
        assert!(parts[0].starts_with("CREATE VIEW v AS SELECT 1 AS x"));
        assert_eq!(parts[1], "SELECT x FROM v");
        assert_eq!(parts[2], "DROP VIEW v");
    }

    #[test]
    fn comments_alone_are_no_statement() {
        let e = split_statements("-- nothing\n  ").unwrap_err().to_string();
        assert!(e.contains("no SQL statement"), "{e}");
    }

    #[test]
    fn what_this_parser_cannot_read_is_left_to_the_engine() {
        // The engine's parser answers (its dialect reads more, and it hints).
        assert_eq!(split_statements("SELEC 1;").unwrap(), vec!["SELEC 1"]);
        assert_eq!(
            split_statements("SELECT * FROM t VERSION AS OF 3")
                .unwrap()
                .len(),
            1
        );
    }
}
