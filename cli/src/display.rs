//! Terminal output: result rows, the per-stage summary, and the progress line.

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::util::pretty::pretty_format_batches;
use indicatif::{ProgressBar, ProgressStyle};
use lambdafusion::status::JobStatus;

/// Formats rows as a table (the header alone when there are none).
pub fn rows_table(schema: &SchemaRef, batches: &[RecordBatch]) -> String {
    let batches = if batches.is_empty() {
        vec![RecordBatch::new_empty(schema.clone())]
    } else {
        batches.to_vec()
    };
    match pretty_format_batches(&batches) {
        Ok(table) => table.to_string(),
        Err(e) => format!("(cannot display rows: {e})"),
    }
}

/// Human-readable bytes (the engine's own rendering, as in decision notes).
pub fn bytes(n: u64) -> String {
    lambdafusion::plan::human_bytes(n)
}

/// A plain text table with a header row; columns sized to fit.
pub fn text_table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            widths[i] = widths[i].max(c.chars().count());
        }
    }
    let line = |cells: Vec<String>| -> String {
        cells
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<w$}", w = widths[i]))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_string()
    };
    let mut out = line(header.iter().map(|h| h.to_string()).collect());
    out.push('\n');
    out.push_str(&line(widths.iter().map(|w| "-".repeat(*w)).collect()));
    out.push('\n');
    for r in rows {
        out.push_str(&line(r.clone()));
        out.push('\n');
    }
    out
}

/// The per-stage summary of a finished query.
pub fn stage_summary(status: &JobStatus) -> String {
    let rows: Vec<Vec<String>> = status
        .stages
        .iter()
        .map(|s| {
            vec![
                s.stage.to_string(),
                format!("{}/{}", s.tasks_done, s.tasks),
                s.rows.to_string(),
                bytes(s.bytes),
                s.elapsed_ms.map_or("-".into(), |ms| format!("{ms} ms")),
                match (s.handoff_ms, s.handoff_calls) {
                    (Some(ms), Some(calls)) => format!(
                        "{ms} ms, {calls} calls{}",
                        if s.handoff_path.as_deref() == Some("stream") {
                            " (stream)"
                        } else {
                            ""
                        }
                    ),
                    (Some(ms), None) => format!("{ms} ms"),
                    _ => "-".into(),
                },
                if s.inputs.is_empty() {
                    "scan".into()
                } else {
                    s.inputs.join(", ")
                },
                s.summary.clone(),
                match (&s.decision, s.planned_tasks) {
                    (Some(rule), Some(planned)) if planned != s.tasks => {
                        format!("{rule} from {planned}")
                    }
                    (Some(rule), _) => rule.clone(),
                    (None, _) => "-".into(),
                },
                requests(&s.requests),
            ]
        })
        .collect();
    text_table(
        &[
            "stage",
            "tasks",
            "rows out",
            "bytes out",
            "time",
            "hand-off",
            "input",
            "operators",
            "adaptive",
            "requests (store r/w, GET/PUT, invokes)",
        ],
        &rows,
    )
}

/// Requests in one short cell: store reads/writes, object GETs/PUTs, invocations.
pub fn requests(r: &lambdafusion::requests::RequestCounts) -> String {
    format!(
        "{}/{}, {}/{}, {}",
        r.store_reads, r.store_writes, r.object_gets, r.object_puts, r.invocations
    )
}

/// One line: state, elapsed time, tasks, requests, estimated cost.
pub fn status_line(status: &JobStatus) -> String {
    format!(
        "query {} {} in {} ms: {} stage{}, {} task{}, {} requests ({}), estimated cost {} at AWS list prices",
        status.id,
        status.state,
        status.elapsed_ms,
        status.stages.len(),
        if status.stages.len() == 1 { "" } else { "s" },
        status.tasks,
        if status.tasks == 1 { "" } else { "s" },
        {
            let r = &status.requests;
            r.store_reads
                + r.store_writes
                + r.object_gets
                + r.object_puts
                + r.object_lists
                + r.object_deletes
                + r.invocations
        },
        status.requests,
        lambdafusion::status::dollars(status.estimated_cost_usd)
    )
}

/// A progress bar over tasks, drawn on stderr when it is a terminal.
pub fn task_progress() -> ProgressBar {
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template("{spinner} {msg} [{bar:30}] {pos}/{len} tasks ({elapsed})")
            .expect("valid template")
            .progress_chars("=> "),
    );
    bar
}

/// Updates a task progress bar from a status.
pub fn update_progress(bar: &ProgressBar, status: &JobStatus) {
    bar.set_length(status.tasks as u64);
    bar.set_position(status.tasks_done as u64);
    let running = status
        .stages
        .iter()
        .filter(|s| s.state == "running")
        .count();
    bar.set_message(format!(
        "{} ({} stage{} running)",
        status.state,
        running,
        if running == 1 { "" } else { "s" }
    ));
}
