//! Pruning by manifest metrics: an Iceberg snapshot's data files as DataFusion's
//! `PruningPredicate` sees them, one container a file, from the column bounds and null
//! counts of its manifest entry.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::UInt64Array;
use datafusion::arrow::datatypes::{DataType, TimeUnit};
use datafusion::common::ScalarValue;

use super::manifests::{DataFile, Metrics};

/// The value of Iceberg's single-value serialization `bytes` (a column bound) as `data_type`,
/// or `None` where pruning should not trust it: floating point (bounds leave NaN out, which
/// DataFusion orders above every number) and types not listed.
fn bound_value(bytes: &[u8], data_type: &DataType) -> Option<ScalarValue> {
    let int = || -> Option<i64> {
        match bytes.len() {
            4 => Some(i32::from_le_bytes(bytes.try_into().ok()?) as i64),
            8 => Some(i64::from_le_bytes(bytes.try_into().ok()?)),
            _ => None,
        }
    };
    Some(match data_type {
        DataType::Boolean => ScalarValue::Boolean(Some(*bytes.first()? != 0)),
        DataType::Int32 if bytes.len() == 4 => ScalarValue::Int32(Some(int()? as i32)),
        // A column promoted from int keeps its older files' 4-byte bounds.
        DataType::Int64 => ScalarValue::Int64(Some(int()?)),
        DataType::Date32 if bytes.len() == 4 => ScalarValue::Date32(Some(int()? as i32)),
        DataType::Timestamp(TimeUnit::Microsecond, tz) if bytes.len() == 8 => {
            ScalarValue::TimestampMicrosecond(Some(int()?), tz.clone())
        }
        DataType::Utf8 => ScalarValue::Utf8(Some(String::from_utf8(bytes.to_vec()).ok()?)),
        DataType::Decimal128(p, s) if !bytes.is_empty() && bytes.len() <= 16 => {
            // Big-endian two's complement of the unscaled value, sign-extended.
            let fill = if bytes[0] & 0x80 != 0 { 0xff } else { 0 };
            let mut wide = [fill; 16];
            wide[16 - bytes.len()..].copy_from_slice(bytes);
            ScalarValue::Decimal128(Some(i128::from_be_bytes(wide)), *p, *s)
        }
        _ => return None,
    })
}

/// A snapshot's data files as DataFusion's pruning sees them: one container a file, its
/// manifest's bounds, null counts and row count.
pub(super) struct FileMetrics<'a> {
    pub(super) files: &'a [&'a DataFile],
    /// Column name -> its field id and type.
    pub(super) columns: &'a HashMap<String, (i32, DataType)>,
}

impl FileMetrics<'_> {
    fn values(
        &self,
        column: &datafusion::common::Column,
        side: impl Fn(&Metrics) -> &HashMap<i32, Vec<u8>>,
    ) -> Option<datafusion::arrow::array::ArrayRef> {
        let (id, data_type) = self.columns.get(column.name())?;
        let null = ScalarValue::try_from(data_type).ok()?;
        let values = self.files.iter().map(|f| {
            side(&f.metrics)
                .get(id)
                .and_then(|b| bound_value(b, data_type))
                .unwrap_or_else(|| null.clone())
        });
        ScalarValue::iter_to_array(values).ok()
    }
}

impl datafusion::common::pruning::PruningStatistics for FileMetrics<'_> {
    fn min_values(
        &self,
        column: &datafusion::common::Column,
    ) -> Option<datafusion::arrow::array::ArrayRef> {
        self.values(column, |m| &m.lower)
    }

    fn max_values(
        &self,
        column: &datafusion::common::Column,
    ) -> Option<datafusion::arrow::array::ArrayRef> {
        self.values(column, |m| &m.upper)
    }

    fn num_containers(&self) -> usize {
        self.files.len()
    }

    fn null_counts(
        &self,
        column: &datafusion::common::Column,
    ) -> Option<datafusion::arrow::array::ArrayRef> {
        let (id, _) = self.columns.get(column.name())?;
        let counts: UInt64Array = self
            .files
            .iter()
            .map(|f| f.metrics.nulls.get(id).copied())
            .collect();
        Some(Arc::new(counts))
    }

    fn row_counts(&self) -> Option<datafusion::arrow::array::ArrayRef> {
        let counts: UInt64Array = self.files.iter().map(|f| f.records).collect();
        Some(Arc::new(counts))
    }

    fn contained(
        &self,
        _column: &datafusion::common::Column,
        _values: &std::collections::HashSet<ScalarValue>,
    ) -> Option<datafusion::arrow::array::BooleanArray> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_decode_as_the_spec_serializes_single_values() {
        let v = |bytes: &[u8], t: DataType| bound_value(bytes, &t);
        assert_eq!(
            v(&7i32.to_le_bytes(), DataType::Int32),
            Some(ScalarValue::Int32(Some(7)))
        );
        assert_eq!(
            v(&(-3i64).to_le_bytes(), DataType::Int64),
            Some(ScalarValue::Int64(Some(-3)))
        );
        // A long column promoted from int: its older files' bounds are 4 bytes.
        assert_eq!(
            v(&(-3i32).to_le_bytes(), DataType::Int64),
            Some(ScalarValue::Int64(Some(-3)))
        );
        assert_eq!(
            v(&20000i32.to_le_bytes(), DataType::Date32),
            Some(ScalarValue::Date32(Some(20000)))
        );
        let tz = DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into()));
        assert_eq!(
            v(&5i64.to_le_bytes(), tz),
            Some(ScalarValue::TimestampMicrosecond(
                Some(5),
                Some("+00:00".into())
            ))
        );
        assert_eq!(
            v(b"eu", DataType::Utf8),
            Some(ScalarValue::Utf8(Some("eu".into())))
        );
        // Decimals: big-endian two's complement, minimal length.
        assert_eq!(
            v(&[0x04, 0xd2], DataType::Decimal128(10, 2)),
            Some(ScalarValue::Decimal128(Some(1234), 10, 2))
        );
        assert_eq!(
            v(&[0xff, 0x6a], DataType::Decimal128(10, 2)),
            Some(ScalarValue::Decimal128(Some(-150), 10, 2))
        );
        assert_eq!(
            v(&[1], DataType::Boolean),
            Some(ScalarValue::Boolean(Some(true)))
        );
        // Not trusted or not understood: no bound, so no file is skipped for it.
        assert_eq!(v(&1.5f64.to_le_bytes(), DataType::Float64), None);
        assert_eq!(v(&[1, 2, 3], DataType::Int32), None);
        assert_eq!(v(&[0xff, 0xfe], DataType::Utf8), None);
    }
}
