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

/// The statements of a script, in order, each as written (comments and all). A script
/// this parser cannot read is sent whole: the engine's parser (its dialect reads
/// `VERSION AS OF`, ...) answers for it, with its own hints.
///
/// Statements are cut at the tokenizer's semicolons, never printed again from the parsed
/// tree: DataFusion prints `CREATE EXTERNAL TABLE` without its columns, `OPTIONS`,
/// `PARTITIONED BY` and `OR REPLACE`, which would define another table than the one
/// written.
pub fn split_statements(script: &str) -> Result<Vec<String>, CliError> {
    let whole = || vec![script.trim().trim_end_matches(';').trim().to_string()];
    let Ok(statements) = DFParser::parse_sql(script) else {
        return Ok(whole());
    };
    if statements.is_empty() {
        return Err("no SQL statement given (only comments or blanks)".into());
    }
    let pieces = pieces(script).unwrap_or_else(whole);
    // The parser and the tokenizer agree on what a statement is; if they ever did not,
    // the script goes whole and the engine says what it makes of it.
    Ok(if pieces.len() == statements.len() {
        pieces
    } else {
        whole()
    })
}

/// `script` cut at its semicolons (those the tokenizer reads as such: not in strings,
/// quoted names or comments), each piece trimmed; pieces of only blanks and comments
/// left out. `None` if it does not tokenize.
fn pieces(script: &str) -> Option<Vec<String>> {
    use datafusion::sql::sqlparser::dialect::GenericDialect;
    use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
    let tokens = Tokenizer::new(&GenericDialect {}, script)
        .tokenize_with_location()
        .ok()?;
    // Byte offset of each line's start (lines from 1).
    let lines: Vec<usize> = std::iter::once(0)
        .chain(script.match_indices('\n').map(|(i, _)| i + 1))
        .collect();
    let offset = |line: u64, column: u64| -> Option<usize> {
        let start = *lines.get(usize::try_from(line).ok()?.checked_sub(1)?)?;
        // Columns count characters, from 1.
        let column = usize::try_from(column).ok()?.checked_sub(1)?;
        Some(match script[start..].char_indices().nth(column) {
            Some((i, _)) => start + i,
            None => script.len(),
        })
    };
    let mut out = Vec::new();
    let (mut from, mut substance) = (0, false);
    for t in &tokens {
        match &t.token {
            Token::SemiColon => {
                let at = offset(t.span.start.line, t.span.start.column)?;
                if substance {
                    out.push(script.get(from..at)?.trim().to_string());
                }
                (from, substance) = (at + 1, false);
            }
            Token::Whitespace(_) | Token::EOF => {}
            _ => substance = true,
        }
    }
    if substance {
        out.push(script.get(from..)?.trim().to_string());
    }
    Some(out)
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
        assert_eq!(parts[1], "-- then\nSELECT x FROM v");
        assert_eq!(parts[2], "DROP VIEW v");
    }

    /// Each statement goes as written: DataFusion's printer would drop a table's
    /// columns, options, partitions and `OR REPLACE`. Semicolons in strings, quoted
    /// names and comments cut nothing; multi-byte text before a cut keeps it in place.
    #[test]
    fn a_script_keeps_each_statement_as_written() {
        let create = "CREATE OR REPLACE EXTERNAL TABLE \"t;1\" (a INT, \"b;é\" VARCHAR) \
                      STORED AS CSV PARTITIONED BY (p) LOCATION '/data/x;y/' \
                      OPTIONS ('format.has_header' 'true', 'format.delimiter' ';')";
        let select = "SELECT ';' AS \"ü;\", 'é' /* ; */ FROM \"t;1\" -- no ; cut here\nWHERE a > 1";
        let script = format!("-- first\n{create};\n\n{select}\n;  -- trailing ; comment\n;;");
        assert_eq!(
            split_statements(&script).unwrap(),
            vec![format!("-- first\n{create}"), select.to_string()]
        );
        assert_eq!(
            split_statements("SELECT 'ß';SELECT 2").unwrap(),
            vec!["SELECT 'ß'", "SELECT 2"]
        );
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
