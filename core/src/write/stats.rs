//! The column statistics of a file a Delta write makes — the `stats` of its `add` action:
//! rows, and per column the NULLs and the least and greatest value — gathered by the
//! task that writes the file, as it writes it. Readers skip files by them (a filter
//! `id > 100` skips a file whose `maxValues.id` is 50), so a bound must never be wrong:
//! only values whose JSON form is exact are given (integers, dates, strings of at most
//! 32 characters); other columns get their NULL count alone, which is always exact.

use datafusion::arrow::array::{Array, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Field, Fields, Schema};
use datafusion::common::ScalarValue;
use datafusion::error::Result as DfResult;
use datafusion::functions_aggregate::min_max::{MaxAccumulator, MinAccumulator};
use datafusion::logical_expr::Accumulator;
use serde_json::{Map, Value};

/// Longest string kept as a bound: Delta's writers truncate longer ones; a truncated
/// maximum would not be one, so such a column's bounds are left out.
const MAX_STRING_BOUND: usize = 32;

/// Whether a column of `data_type` gets bounds.
fn bounded(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::Date32
            | DataType::Utf8
            | DataType::LargeUtf8
            | DataType::Utf8View
    )
}

/// Whether a column of `data_type` gets statistics at all (top-level values only).
fn counted(data_type: &DataType) -> bool {
    !data_type.is_nested()
}

/// The statistics of one file in progress.
pub(super) struct FileStats {
    columns: Vec<ColumnStats>,
}

struct ColumnStats {
    name: String,
    index: usize,
    nulls: u64,
    bounds: Option<(MinAccumulator, MaxAccumulator)>,
}

impl FileStats {
    /// Statistics for a file of `schema`'s columns.
    pub(super) fn new(schema: &Schema) -> DfResult<Self> {
        let mut columns = Vec::new();
        for (index, field) in schema.fields().iter().enumerate() {
            if !counted(field.data_type()) {
                continue;
            }
            let bounds = if bounded(field.data_type()) {
                Some((
                    MinAccumulator::try_new(field.data_type())?,
                    MaxAccumulator::try_new(field.data_type())?,
                ))
            } else {
                None
            };
            columns.push(ColumnStats {
                name: field.name().clone(),
                index,
                nulls: 0,
                bounds,
            });
        }
        Ok(Self { columns })
    }

    /// Counts `batch`'s values in.
    pub(super) fn update(&mut self, batch: &RecordBatch) -> DfResult<()> {
        for column in &mut self.columns {
            let array = batch.column(column.index);
            column.nulls += array.null_count() as u64;
            if let Some((min, max)) = &mut column.bounds {
                min.update_batch(std::slice::from_ref(array))?;
                max.update_batch(std::slice::from_ref(array))?;
            }
        }
        Ok(())
    }

    /// The `stats` JSON of a file of `rows` rows.
    pub(super) fn finish(self, rows: u64) -> DfResult<String> {
        let (mut mins, mut maxes, mut nulls) = (Map::new(), Map::new(), Map::new());
        for mut column in self.columns {
            nulls.insert(column.name.clone(), Value::from(column.nulls));
            if let Some((min, max)) = &mut column.bounds {
                if let (Some(low), Some(high)) = (bound(&min.evaluate()?), bound(&max.evaluate()?))
                {
                    mins.insert(column.name.clone(), low);
                    maxes.insert(column.name, high);
                }
            }
        }
        let mut stats = Map::new();
        stats.insert("numRecords".into(), Value::from(rows));
        stats.insert("minValues".into(), Value::Object(mins));
        stats.insert("maxValues".into(), Value::Object(maxes));
        stats.insert("nullCount".into(), Value::Object(nulls));
        Ok(Value::Object(stats).to_string())
    }
}

/// A value as an exact JSON bound, if it has one.
fn bound(value: &ScalarValue) -> Option<Value> {
    match value {
        ScalarValue::Int8(Some(v)) => Some(Value::from(*v)),
        ScalarValue::Int16(Some(v)) => Some(Value::from(*v)),
        ScalarValue::Int32(Some(v)) => Some(Value::from(*v)),
        ScalarValue::Int64(Some(v)) => Some(Value::from(*v)),
        ScalarValue::Date32(Some(_)) => Some(Value::from(value.to_string())),
        ScalarValue::Utf8(Some(s))
        | ScalarValue::LargeUtf8(Some(s))
        | ScalarValue::Utf8View(Some(s))
            if s.chars().count() <= MAX_STRING_BOUND =>
        {
            Some(Value::from(s.clone()))
        }
        _ => None,
    }
}

/// The schema the `stats` of files of a table of `columns` (its non-partition columns)
/// are read into, for the Delta kernel's `add` actions.
pub(super) fn stats_schema(columns: &[Field]) -> Schema {
    let bound_type = |t: &DataType| match t {
        DataType::LargeUtf8 | DataType::Utf8View => DataType::Utf8,
        other => other.clone(),
    };
    let nulls: Fields = columns
        .iter()
        .filter(|f| counted(f.data_type()))
        .map(|f| Field::new(f.name(), DataType::Int64, true))
        .collect();
    let bounds: Fields = columns
        .iter()
        .filter(|f| bounded(f.data_type()))
        .map(|f| Field::new(f.name(), bound_type(f.data_type()), true))
        .collect();
    let mut fields = vec![Field::new("numRecords", DataType::Int64, true)];
    if !nulls.is_empty() {
        fields.push(Field::new("nullCount", DataType::Struct(nulls), true));
    }
    if !bounds.is_empty() {
        fields.push(Field::new(
            "minValues",
            DataType::Struct(bounds.clone()),
            true,
        ));
        fields.push(Field::new("maxValues", DataType::Struct(bounds), true));
    }
    Schema::new(fields)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{Date32Array, Float64Array, Int64Array, StringArray};

    use super::*;

    #[test]
    fn bounds_are_exact_or_left_out() {
        let schema = Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("x", DataType::Float64, true),
            Field::new("day", DataType::Date32, true),
            Field::new("s", DataType::Utf8, true),
            Field::new("long", DataType::Utf8, true),
        ]);
        let mut stats = FileStats::new(&schema).unwrap();
        for (ids, days) in [([5, 3], [20000, 20001]), ([9, 4], [19999, 20002])] {
            let batch = RecordBatch::try_new(
                Arc::new(schema.clone()),
                vec![
                    Arc::new(Int64Array::from(vec![Some(ids[0]), Some(ids[1]), None])),
                    Arc::new(Float64Array::from(vec![1.0, f64::NAN, 2.0])),
                    Arc::new(Date32Array::from(vec![Some(days[0]), None, Some(days[1])])),
                    Arc::new(StringArray::from(vec!["b", "a", "c"])),
                    Arc::new(StringArray::from(vec![
                        "x".repeat(40),
                        "y".into(),
                        "z".into(),
                    ])),
                ],
            )
            .unwrap();
            stats.update(&batch).unwrap();
        }
        let json: Value = serde_json::from_str(&stats.finish(6).unwrap()).unwrap();
        assert_eq!(json["numRecords"], 6);
        assert_eq!(json["minValues"]["id"], 3);
        assert_eq!(json["maxValues"]["id"], 9);
        assert_eq!(json["nullCount"]["id"], 2);
        assert_eq!(json["minValues"]["day"], "2024-10-03");
        assert_eq!(json["maxValues"]["day"], "2024-10-06");
        assert_eq!(json["minValues"]["s"], "a");
        assert_eq!(json["maxValues"]["s"], "c");
        // A float (NaN has no order readers agree on) and a string past 32 characters
        // have no bounds; their NULLs are counted.
        assert!(json["minValues"].get("x").is_none());
        assert!(json["maxValues"].get("long").is_none());
        assert_eq!(json["nullCount"]["x"], 0);
    }
}
