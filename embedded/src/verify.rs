//! Result comparison: does a distributed result equal single-process DataFusion's?
//! Rows are compared as multisets unless the query orders them; floating-point cells
//! within a relative tolerance (sums in a different order round differently).

use datafusion::arrow::array::{Array, RecordBatch};
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};

/// One cell, normalized for comparison.
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    /// A floating-point value.
    Float(f64),
    /// Anything else, as displayed (`NULL` for nulls).
    Text(String),
}

/// The rows of `batches` as cells.
pub fn rows(batches: &[RecordBatch]) -> Vec<Vec<Cell>> {
    let options = FormatOptions::default().with_null("NULL");
    let mut out = Vec::new();
    for batch in batches {
        let columns: Vec<_> = batch.columns().iter().collect();
        let formatters: Vec<_> = columns
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &options).expect("displayable column"))
            .collect();
        for row in 0..batch.num_rows() {
            out.push(
                columns
                    .iter()
                    .zip(&formatters)
                    .map(|(col, fmt)| cell(col.as_ref(), fmt, row))
                    .collect(),
            );
        }
    }
    out
}

fn cell(col: &dyn Array, fmt: &ArrayFormatter, row: usize) -> Cell {
    let text = fmt.value(row).to_string();
    let float = matches!(
        col.data_type(),
        DataType::Float16 | DataType::Float32 | DataType::Float64
    );
    match (float && !col.is_null(row), text.parse::<f64>()) {
        (true, Ok(v)) => Cell::Float(v),
        _ => Cell::Text(text),
    }
}

fn sort_key(row: &[Cell]) -> String {
    row.iter()
        .map(|c| match c {
            Cell::Float(v) => format!("{:.2e}", v),
            Cell::Text(t) => t.clone(),
        })
        .collect::<Vec<_>>()
        .join("\u{1f}")
}

fn same_cell(a: &Cell, b: &Cell) -> bool {
    match (a, b) {
        (Cell::Float(x), Cell::Float(y)) => {
            x == y || (x - y).abs() <= 1e-6 * x.abs().max(y.abs()).max(1.0)
        }
        (a, b) => a == b,
    }
}

/// Compares two results; `Err` describes the first difference.
pub fn compare(
    expected: &[RecordBatch],
    actual: &[RecordBatch],
    ordered: bool,
) -> Result<(), String> {
    let mut e = rows(expected);
    let mut a = rows(actual);
    if e.len() != a.len() {
        return Err(format!("expected {} rows, got {}", e.len(), a.len()));
    }
    if !ordered {
        e.sort_by_key(|r| sort_key(r));
        a.sort_by_key(|r| sort_key(r));
    }
    for (i, (er, ar)) in e.iter().zip(&a).enumerate() {
        if er.len() != ar.len() || !er.iter().zip(ar).all(|(x, y)| same_cell(x, y)) {
            return Err(format!(
                "row {i} differs:\n  expected {er:?}\n  actual   {ar:?}"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{Float64Array, Int32Array};
    use datafusion::arrow::datatypes::{Field, Schema};

    use super::*;

    fn batch(ids: Vec<i32>, vals: Vec<f64>) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int32, false),
            Field::new("v", DataType::Float64, false),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int32Array::from(ids)),
                Arc::new(Float64Array::from(vals)),
            ],
        )
        .unwrap()
    }

    #[test]
    fn unordered_results_compare_as_multisets_with_float_tolerance() {
        let e = batch(vec![1, 2], vec![0.1 + 0.2, 5.0]);
        let a = batch(vec![2, 1], vec![5.0, 0.3]);
        assert!(compare(std::slice::from_ref(&e), std::slice::from_ref(&a), false).is_ok());
        assert!(
            compare(&[e], &[a], true).is_err(),
            "order matters when ordered"
        );
    }

    #[test]
    fn differences_are_reported() {
        let e = batch(vec![1, 2], vec![1.0, 2.0]);
        assert!(compare(
            std::slice::from_ref(&e),
            &[batch(vec![1, 2], vec![1.0, 2.1])],
            false
        )
        .is_err());
        assert!(compare(
            std::slice::from_ref(&e),
            &[batch(vec![1], vec![1.0])],
            false
        )
        .is_err());
        assert!(compare(&[e], &[batch(vec![1, 3], vec![1.0, 2.0])], false).is_err());
    }
}
