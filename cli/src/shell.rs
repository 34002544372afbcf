//! `lambdafusion shell`: an interactive SQL shell on the embedded engine or an endpoint,
//! modelled on the DataFusion CLI. A statement runs once a line ends it with `;`, so it
//! may span lines; `\d` lists tables, `\d NAME` describes one, `\q` quits, `\?` helps.
//! History is kept in a file; without a terminal, lines are read plainly from stdin.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use rustyline::error::ReadlineError;
use rustyline::DefaultEditor;

use crate::display;
use crate::error::CliError;
use crate::session::{split_statements, write_rows, OutputFormat, Session};

const PROMPT: &str = "lambdafusion> ";
const CONTINUATION: &str = "           -> ";
const HELP: &str = "\\d           list tables\n\
                    \\d NAME      describe table NAME\n\
                    \\q           quit (or Ctrl+D)\n\
                    \\?           this help\n\
                    A statement runs when a line ends with `;`; Ctrl+C drops the one being typed.";

/// What one line of input asks for.
#[derive(Debug, PartialEq, Eq)]
enum Command {
    /// Quit.
    Quit,
    /// Print the help.
    Help,
    /// List the tables.
    Tables,
    /// Describe one table.
    Describe(String),
    /// A backslash command the shell does not know.
    Unknown(String),
    /// Part of a statement.
    Sql,
}

fn command(line: &str) -> Command {
    let line = line.trim().trim_end_matches(';');
    let Some(rest) = line.strip_prefix('\\') else {
        return if line.eq_ignore_ascii_case("quit") || line.eq_ignore_ascii_case("exit") {
            Command::Quit
        } else {
            Command::Sql
        };
    };
    let mut words = rest.split_whitespace();
    match (words.next(), words.next()) {
        (Some("q"), None) => Command::Quit,
        (Some("?") | Some("h"), None) => Command::Help,
        (Some("d"), None) => Command::Tables,
        (Some("d"), Some(name)) => Command::Describe(name.to_string()),
        _ => Command::Unknown(line.to_string()),
    }
}

/// Whether `buffer` holds a finished statement: its last line, outside a `--` comment,
/// ends with `;`.
fn statement_complete(buffer: &str) -> bool {
    let last = buffer.trim_end().lines().last().unwrap_or_default();
    let code = match last.find("--") {
        Some(i) => &last[..i],
        None => last,
    };
    code.trim_end().ends_with(';')
}

/// Where the shell keeps its history.
pub fn history_file() -> Option<PathBuf> {
    std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".lambdafusion_history"))
}

/// Runs the shell until `\q` or end of input.
pub async fn run(session: &Session, max_seconds: Option<f64>) -> Result<(), CliError> {
    let mut editor =
        DefaultEditor::new().map_err(|e| format!("cannot start the line editor: {e}"))?;
    let history = history_file();
    if let Some(path) = &history {
        let _ = editor.load_history(path);
    }
    eprintln!("lambdafusion shell; \\? for help, \\q to quit");
    let mut buffer = String::new();
    loop {
        let prompt = if buffer.is_empty() {
            PROMPT
        } else {
            CONTINUATION
        };
        let line = match editor.readline(prompt) {
            Ok(line) => line,
            Err(ReadlineError::Interrupted) => {
                buffer.clear();
                continue;
            }
            Err(ReadlineError::Eof) => break,
            Err(e) => return Err(e.to_string().into()),
        };
        if buffer.is_empty() {
            let trimmed = line.trim();
            if trimmed.is_empty() {
                continue;
            }
            let done = match command(trimmed) {
                Command::Sql => false,
                Command::Quit => break,
                Command::Help => {
                    println!("{HELP}");
                    true
                }
                Command::Tables => {
                    report(list_tables(session).await);
                    true
                }
                Command::Describe(name) => {
                    report(describe(session, &name).await);
                    true
                }
                Command::Unknown(c) => {
                    eprintln!("unknown command {c}; \\? lists the commands");
                    true
                }
            };
            if done {
                let _ = editor.add_history_entry(trimmed);
                continue;
            }
        }
        buffer.push_str(&line);
        buffer.push('\n');
        if !statement_complete(&buffer) {
            continue;
        }
        let script = std::mem::take(&mut buffer);
        let _ = editor.add_history_entry(script.trim());
        report(run_script(session, &script, max_seconds).await);
    }
    if let Some(path) = &history {
        let _ = editor.save_history(path);
    }
    Ok(())
}

fn report(result: Result<(), CliError>) {
    if let Err(e) = result {
        eprintln!("error: {e}");
    }
}

async fn run_script(
    session: &Session,
    script: &str,
    max_seconds: Option<f64>,
) -> Result<(), CliError> {
    for sql in split_statements(script)? {
        let started = Instant::now();
        let outcome = session.run(&sql, max_seconds).await?;
        let mut out = std::io::stdout();
        write_rows(
            OutputFormat::Table,
            &outcome.schema,
            &outcome.batches,
            &mut out,
        )?;
        let _ = out.flush();
        eprintln!(
            "{} ({:.3} s)",
            display::status_line(&outcome.status),
            started.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

async fn list_tables(session: &Session) -> Result<(), CliError> {
    let tables = session.tables().await?;
    let rows: Vec<Vec<String>> = tables
        .tables
        .iter()
        .map(|t| {
            vec![
                t.name.clone(),
                t.format.clone(),
                t.columns.len().to_string(),
                t.locations.join(", "),
            ]
        })
        .collect();
    println!(
        "{}",
        display::text_table(&["table", "format", "columns", "location"], &rows)
    );
    Ok(())
}

async fn describe(session: &Session, name: &str) -> Result<(), CliError> {
    let tables = session.tables().await?;
    let table = tables
        .tables
        .iter()
        .find(|t| t.name.eq_ignore_ascii_case(name))
        .ok_or_else(|| format!("no table {name}; \\d lists them"))?;
    let rows: Vec<Vec<String>> = table
        .columns
        .iter()
        .map(|c| vec![c.name.clone(), c.data_type.clone()])
        .collect();
    println!("{}", display::text_table(&["column", "type"], &rows));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backslash_commands() {
        assert_eq!(command("\\q"), Command::Quit);
        assert_eq!(command("quit;"), Command::Quit);
        assert_eq!(command("\\d"), Command::Tables);
        assert_eq!(
            command("\\d lineitem"),
            Command::Describe("lineitem".into())
        );
        assert_eq!(command("\\?"), Command::Help);
        assert_eq!(command("\\x"), Command::Unknown("\\x".into()));
        assert_eq!(command("SELECT 1;"), Command::Sql);
    }

    #[test]
    fn a_statement_ends_with_a_semicolon_outside_a_comment() {
        assert!(statement_complete("SELECT 1;\n"));
        assert!(statement_complete("SELECT\n  1; -- done\n"));
        assert!(!statement_complete("SELECT 1 -- not yet;\n"));
        assert!(!statement_complete("SELECT 1\n"));
    }
}
