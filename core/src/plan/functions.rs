//! Size-making functions with a bound: `repeat`, `lpad`, `rpad`, `replace`,
//! `regexp_replace`, `array_repeat`, `array_resize`, `range` and `generate_series` can
//! make a value far larger than their arguments (`repeat('x', 2147483647)` is 40 bytes
//! of SQL and 2 GiB of memory, allocated outside any memory pool — while planning, by
//! constant folding, or in a task). Each is registered in every session in a wrapper
//! that works out the most bytes a call can produce from its arguments, before calling
//! the function, and refuses a call past [`EngineConfig::max_value_bytes`] with an error
//! naming the function and the setting. Everything else about the function (name,
//! signature, simplification, ordering, documentation) is the function's own, so plans
//! encode and decode by name as before.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::compute::kernels::length::length;
use datafusion::arrow::datatypes::{DataType, FieldRef, Int64Type};
use datafusion::common::config::ConfigOptions;
use datafusion::common::{exec_err, ExprSchema, Result as DfResult, ScalarValue};
use datafusion::execution::{FunctionRegistry, SessionState};
use datafusion::logical_expr::interval_arithmetic::Interval;
use datafusion::logical_expr::preimage::PreimageResult;
use datafusion::logical_expr::simplify::{ExprSimplifyResult, SimplifyContext};
use datafusion::logical_expr::sort_properties::{ExprProperties, SortProperties};
use datafusion::logical_expr::udf_eq::UdfEq;
use datafusion::logical_expr::{
    ColumnarValue, Documentation, Expr, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF,
    ScalarUDFImpl, Signature,
};

use crate::EngineConfig;

/// How the most bytes a call of a function can produce follow from its arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Bound {
    /// `repeat(s, n)`: `len(s) * n`.
    Repeat,
    /// `lpad(s, n [, fill])`, `rpad`: `n` characters.
    Pad,
    /// `replace(s, from, to)`: every occurrence of `from` (every character boundary when
    /// it is empty) becomes `to`.
    Replace,
    /// `regexp_replace(s, pattern, replacement [, flags])`: every match (at most one per
    /// byte and one more) becomes the replacement, each of its group references up to
    /// `s` itself.
    RegexpReplace,
    /// `array_repeat(element, n)`: `n` elements.
    ArrayRepeat,
    /// `array_resize(array, n [, value])`: `n` elements.
    ArrayResize,
    /// `range([start,] stop [, step])`, `generate_series`: `(stop - start) / step`
    /// elements.
    Range,
}

/// The functions that get a bound, by the name they are registered under.
const BOUNDED: &[(&str, Bound)] = &[
    ("repeat", Bound::Repeat),
    ("lpad", Bound::Pad),
    ("rpad", Bound::Pad),
    ("replace", Bound::Replace),
    ("regexp_replace", Bound::RegexpReplace),
    ("array_repeat", Bound::ArrayRepeat),
    ("array_resize", Bound::ArrayResize),
    ("range", Bound::Range),
    ("generate_series", Bound::Range),
];

/// Registers the bounded wrappers of [`BOUNDED`] in `state`, in place of the functions
/// themselves.
pub fn install(state: &mut SessionState, config: &EngineConfig) {
    for (name, bound) in BOUNDED {
        let Some(inner) = state.scalar_functions().get(*name).cloned() else {
            continue;
        };
        let wrapped = ScalarUDF::new_from_impl(BoundedUdf {
            inner: UdfEq::from(inner.inner().clone()),
            bound: *bound,
            max_bytes: config.max_value_bytes,
        });
        // Aliases (`list_repeat`, ...) are registered by the wrapper's own alias list.
        let _ = state.register_udf(Arc::new(wrapped));
    }
}

/// A function with a [`Bound`] on what one call may produce.
#[derive(Debug, PartialEq, Eq, Hash)]
struct BoundedUdf {
    inner: UdfEq<Arc<dyn ScalarUDFImpl>>,
    bound: Bound,
    max_bytes: usize,
}

impl BoundedUdf {
    fn check(&self, args: &ScalarFunctionArgs) -> DfResult<()> {
        let Some(bytes) = most_bytes(self.bound, &args.args, args.number_rows)? else {
            return Ok(());
        };
        if bytes > self.max_bytes as i128 {
            return exec_err!(
                "{}(...) would produce about {} in one call; at most {} are allowed \
                 (max_value_bytes)",
                self.inner.name(),
                human(bytes),
                human(self.max_bytes as i128)
            );
        }
        Ok(())
    }
}

fn human(bytes: i128) -> String {
    crate::plan::human_bytes(bytes.clamp(0, u64::MAX as i128) as u64)
}

/// One argument as the bound needs it: one value for every row, or a value per row.
enum Measure {
    One(Option<i128>),
    Rows(Vec<Option<i128>>),
}

impl Measure {
    fn at(&self, row: usize) -> Option<i128> {
        match self {
            Measure::One(v) => *v,
            Measure::Rows(values) => values.get(row).copied().flatten(),
        }
    }
}

/// Byte lengths of strings and binaries, element counts of lists.
fn lengths(value: &ColumnarValue) -> DfResult<Option<Measure>> {
    let array = match value {
        ColumnarValue::Scalar(s) if s.is_null() => return Ok(Some(Measure::One(None))),
        ColumnarValue::Scalar(s) => s.to_array_of_size(1)?,
        ColumnarValue::Array(a) => a.clone(),
    };
    let Ok(lengths) = length(array.as_ref()) else {
        return Ok(None);
    };
    let values = integers_of(&lengths)?;
    Ok(Some(match value {
        ColumnarValue::Scalar(_) => Measure::One(values.first().copied().flatten()),
        ColumnarValue::Array(_) => Measure::Rows(values),
    }))
}

/// Integer arguments (counts, lengths, range ends).
fn integers(value: &ColumnarValue) -> DfResult<Option<Measure>> {
    match value {
        ColumnarValue::Scalar(s) => {
            if s.is_null() {
                return Ok(Some(Measure::One(None)));
            }
            if !s.data_type().is_integer() {
                return Ok(None);
            }
            let array = s.to_array_of_size(1)?;
            Ok(Some(Measure::One(integers_of(&array)?[0])))
        }
        ColumnarValue::Array(a) if a.data_type().is_integer() => {
            Ok(Some(Measure::Rows(integers_of(a)?)))
        }
        ColumnarValue::Array(_) => Ok(None),
    }
}

fn integers_of(array: &ArrayRef) -> DfResult<Vec<Option<i128>>> {
    let wide = cast(array, &DataType::Int64)?;
    Ok(wide
        .as_primitive::<Int64Type>()
        .iter()
        .map(|v| v.map(i128::from))
        .collect())
}

/// Bytes of one element: a scalar's size, or an array's average per row.
fn element_bytes(value: &ColumnarValue) -> Measure {
    match value {
        ColumnarValue::Scalar(s) => Measure::One(Some(s.size() as i128)),
        ColumnarValue::Array(a) => {
            let per_row = a.get_array_memory_size() / a.len().max(1);
            Measure::One(Some(per_row as i128 + 1))
        }
    }
}

/// Sums `f` over the rows of a call (once when every argument is one value).
fn over_rows(rows: usize, measures: &[Measure], f: impl Fn(&[i128]) -> i128) -> i128 {
    let all_one = measures.iter().all(|m| matches!(m, Measure::One(_)));
    let count = if all_one { 1 } else { rows };
    let mut total = 0i128;
    let mut values = vec![0i128; measures.len()];
    for row in 0..count {
        for (slot, m) in values.iter_mut().zip(measures) {
            *slot = m.at(row).unwrap_or(0);
        }
        total = total.saturating_add(f(&values).max(0));
    }
    total
}

/// The most bytes one call can produce, or `None` when the arguments are of a kind the
/// bound does not know (the function then runs as it would have).
fn most_bytes(bound: Bound, args: &[ColumnarValue], rows: usize) -> DfResult<Option<i128>> {
    let measured =
        |items: Vec<Option<Measure>>| -> Option<Vec<Measure>> { items.into_iter().collect() };
    Ok(match bound {
        Bound::Repeat => {
            let (Some(s), Some(n)) = (args.first(), args.get(1)) else {
                return Ok(None);
            };
            measured(vec![lengths(s)?, integers(n)?])
                .map(|m| over_rows(rows, &m, |v| v[0].saturating_mul(v[1].max(0))))
        }
        Bound::Pad => {
            let Some(n) = args.get(1) else {
                return Ok(None);
            };
            measured(vec![integers(n)?]).map(|m| over_rows(rows, &m, |v| v[0]))
        }
        Bound::Replace => {
            let (Some(s), Some(from), Some(to)) = (args.first(), args.get(1), args.get(2)) else {
                return Ok(None);
            };
            measured(vec![lengths(s)?, lengths(from)?, lengths(to)?]).map(|m| {
                over_rows(rows, &m, |v| {
                    let (s, from, to) = (v[0], v[1], v[2]);
                    let occurrences = if from == 0 { s + 1 } else { s / from };
                    s.saturating_add(occurrences.saturating_mul(to))
                })
            })
        }
        Bound::RegexpReplace => {
            let (Some(s), Some(replacement)) = (args.first(), args.get(2)) else {
                return Ok(None);
            };
            // Group references (`\1`, `$1`, `${name}`) each bring up to the whole input.
            let references = match replacement {
                ColumnarValue::Scalar(r) => {
                    Measure::One(Some(r.to_string().matches(['\\', '$']).count() as i128))
                }
                // At least two characters each.
                other => match lengths(other)? {
                    Some(Measure::One(v)) => Measure::One(v.map(|l| l / 2)),
                    Some(Measure::Rows(v)) => {
                        Measure::Rows(v.into_iter().map(|l| l.map(|l| l / 2)).collect())
                    }
                    None => return Ok(None),
                },
            };
            measured(vec![lengths(s)?, lengths(replacement)?, Some(references)]).map(|m| {
                over_rows(rows, &m, |v| {
                    let (s, replacement, references) = (v[0], v[1], v[2]);
                    let each = replacement.saturating_add(references.saturating_mul(s));
                    s.saturating_add((s + 1).saturating_mul(each))
                })
            })
        }
        Bound::ArrayRepeat => {
            let (Some(element), Some(n)) = (args.first(), args.get(1)) else {
                return Ok(None);
            };
            measured(vec![Some(element_bytes(element)), integers(n)?])
                .map(|m| over_rows(rows, &m, |v| v[0].saturating_mul(v[1].max(0))))
        }
        Bound::ArrayResize => {
            let Some(n) = args.get(1) else {
                return Ok(None);
            };
            let value = args.get(2).map_or(Measure::One(Some(8)), element_bytes);
            measured(vec![integers(n)?, Some(value)])
                .map(|m| over_rows(rows, &m, |v| v[0].max(0).saturating_mul(v[1].max(8))))
        }
        Bound::Range => range_bytes(args, rows)?,
    })
}

/// Elements of `range` / `generate_series` times eight bytes: integer ranges row by
/// row; date and timestamp ranges when their ends and step are single values.
fn range_bytes(args: &[ColumnarValue], rows: usize) -> DfResult<Option<i128>> {
    let all_integers = args.iter().all(|a| match a {
        ColumnarValue::Scalar(s) => s.is_null() || s.data_type().is_integer(),
        ColumnarValue::Array(a) => a.data_type().is_integer(),
    });
    if all_integers {
        let measures: Option<Vec<Measure>> = args
            .iter()
            .map(integers)
            .collect::<DfResult<Vec<_>>>()?
            .into_iter()
            .collect();
        let Some(m) = measures else {
            return Ok(None);
        };
        return Ok(Some(over_rows(rows, &m, |v| {
            let (start, stop, step) = match v {
                [stop] => (0, *stop, 1),
                [start, stop] => (*start, *stop, 1),
                [start, stop, step, ..] => (*start, *stop, *step),
                [] => (0, 0, 1),
            };
            let span = stop.saturating_sub(start).abs();
            span.checked_div(step.abs())
                .map_or(0, |n| n + 1)
                .saturating_mul(8)
        })));
    }
    // Temporal: start, stop and an interval step, each a single value.
    let [ColumnarValue::Scalar(start), ColumnarValue::Scalar(stop), ColumnarValue::Scalar(step)] =
        args
    else {
        return Ok(None);
    };
    let (Some(start), Some(stop), Some(step)) = (nanos_of(start), nanos_of(stop), step_nanos(step))
    else {
        return Ok(None);
    };
    if step == 0 {
        return Ok(None);
    }
    Ok(Some(
        ((stop - start).abs() / step.abs() + 1).saturating_mul(8),
    ))
}

/// A date or timestamp as nanoseconds since the epoch.
fn nanos_of(value: &ScalarValue) -> Option<i128> {
    const DAY: i128 = 86_400_000_000_000;
    Some(match value {
        ScalarValue::Date32(Some(d)) => *d as i128 * DAY,
        ScalarValue::Date64(Some(ms)) => *ms as i128 * 1_000_000,
        ScalarValue::TimestampSecond(Some(s), _) => *s as i128 * 1_000_000_000,
        ScalarValue::TimestampMillisecond(Some(ms), _) => *ms as i128 * 1_000_000,
        ScalarValue::TimestampMicrosecond(Some(us), _) => *us as i128 * 1_000,
        ScalarValue::TimestampNanosecond(Some(ns), _) => *ns as i128,
        _ => return None,
    })
}

/// An interval step in nanoseconds, a month counted as its shortest (28 days), so that
/// the element count is never under-estimated.
fn step_nanos(value: &ScalarValue) -> Option<i128> {
    const DAY: i128 = 86_400_000_000_000;
    Some(match value {
        ScalarValue::IntervalYearMonth(Some(months)) => *months as i128 * 28 * DAY,
        ScalarValue::IntervalDayTime(Some(v)) => {
            v.days as i128 * DAY + v.milliseconds as i128 * 1_000_000
        }
        ScalarValue::IntervalMonthDayNano(Some(v)) => {
            v.months as i128 * 28 * DAY + v.days as i128 * DAY + v.nanoseconds as i128
        }
        _ => return None,
    })
}

// Everything but `invoke_with_args` is the wrapped function's own.
#[warn(clippy::missing_trait_methods)]
impl ScalarUDFImpl for BoundedUdf {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn display_name(&self, args: &[Expr]) -> DfResult<String> {
        #[allow(deprecated)]
        self.inner.display_name(args)
    }

    fn schema_name(&self, args: &[Expr]) -> DfResult<String> {
        self.inner.schema_name(args)
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        self.inner.return_type(arg_types)
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> DfResult<FieldRef> {
        self.inner.return_field_from_args(args)
    }

    fn is_nullable(&self, args: &[Expr], schema: &dyn ExprSchema) -> bool {
        #[allow(deprecated)]
        self.inner.is_nullable(args, schema)
    }

    fn is_strict(&self) -> bool {
        self.inner.is_strict()
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        self.check(&args)?;
        self.inner.invoke_with_args(args)
    }

    fn with_updated_config(&self, config: &ConfigOptions) -> Option<ScalarUDF> {
        let updated = self.inner.with_updated_config(config)?;
        Some(ScalarUDF::new_from_impl(BoundedUdf {
            inner: UdfEq::from(updated.inner().clone()),
            bound: self.bound,
            max_bytes: self.max_bytes,
        }))
    }

    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }

    fn simplify(&self, args: Vec<Expr>, info: &SimplifyContext) -> DfResult<ExprSimplifyResult> {
        self.inner.simplify(args, info)
    }

    fn preimage(
        &self,
        args: &[Expr],
        lit_expr: &Expr,
        info: &SimplifyContext,
    ) -> DfResult<PreimageResult> {
        self.inner.preimage(args, lit_expr, info)
    }

    fn conditional_arguments<'a>(
        &self,
        args: &'a [Expr],
    ) -> Option<(Vec<&'a Expr>, Vec<&'a Expr>)> {
        self.inner.conditional_arguments(args)
    }

    fn short_circuits(&self) -> bool {
        self.inner.short_circuits()
    }

    fn evaluate_bounds(&self, input: &[&Interval]) -> DfResult<Interval> {
        self.inner.evaluate_bounds(input)
    }

    fn propagate_constraints(
        &self,
        interval: &Interval,
        inputs: &[&Interval],
    ) -> DfResult<Option<Vec<Interval>>> {
        self.inner.propagate_constraints(interval, inputs)
    }

    fn struct_field_mapping(
        &self,
        literal_args: &[Option<ScalarValue>],
    ) -> Option<datafusion::logical_expr::StructFieldMapping> {
        self.inner.struct_field_mapping(literal_args)
    }

    fn output_ordering(&self, inputs: &[ExprProperties]) -> DfResult<SortProperties> {
        self.inner.output_ordering(inputs)
    }

    fn preserves_lex_ordering(&self, inputs: &[ExprProperties]) -> DfResult<bool> {
        self.inner.preserves_lex_ordering(inputs)
    }

    fn strictly_order_preserving(&self, inputs: &[ExprProperties]) -> DfResult<bool> {
        self.inner.strictly_order_preserving(inputs)
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        self.inner.coerce_types(arg_types)
    }

    fn documentation(&self) -> Option<&Documentation> {
        self.inner.documentation()
    }

    fn placement(
        &self,
        args: &[datafusion::logical_expr::ExpressionPlacement],
    ) -> datafusion::logical_expr::ExpressionPlacement {
        self.inner.placement(args)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::SessionContext;

    async fn run(sql: &str) -> DfResult<Vec<datafusion::arrow::array::RecordBatch>> {
        let config = EngineConfig {
            max_value_bytes: 1024 * 1024,
            ..EngineConfig::default()
        };
        let mut state = datafusion::execution::SessionStateBuilder::new()
            .with_default_features()
            .build();
        install(&mut state, &config);
        let ctx = SessionContext::new_with_state(state);
        ctx.sql(sql).await?.collect().await
    }

    #[tokio::test]
    async fn size_making_calls_past_the_bound_are_refused_while_planning_or_running() {
        for sql in [
            "SELECT length(repeat('x', 2147483647))",
            "SELECT lpad('x', 2000000)",
            "SELECT rpad('x', 2000000, 'ab')",
            "SELECT replace(repeat('a', 2000), '', repeat('b', 1000))",
            "SELECT regexp_replace(repeat('a', 2000), 'a', repeat('b', 1000), 'g')",
            "SELECT cardinality(array_repeat(1, 1000000))",
            "SELECT cardinality(range(1, 10000000))",
            "SELECT cardinality(generate_series(1, 10000000))",
            "SELECT cardinality(array_resize(make_array(1), 1000000))",
            "SELECT cardinality(range(DATE '1970-01-01', DATE '2970-01-01', INTERVAL '1 day'))",
            // In a task: the count comes from a column.
            "SELECT length(repeat('xy', n)) FROM (VALUES (10), (2000000)) t(n)",
        ] {
            let e = run(sql).await.unwrap_err();
            assert!(e.to_string().contains("max_value_bytes"), "{sql}: {e}");
        }
    }

    #[tokio::test]
    async fn calls_within_the_bound_answer_as_before() {
        let rows = run(
            "SELECT length(repeat('x', 1000)), lpad('7', 3, '0'), replace('aXa', 'X', 'yy'), \
             regexp_replace('abc', '(b)', '[$1]'), cardinality(array_repeat(1, 3)), \
             cardinality(range(5)), cardinality(generate_series(1, 5)), \
             cardinality(list_repeat('a', 2))",
        )
        .await
        .unwrap();
        let text = datafusion::arrow::util::pretty::pretty_format_batches(&rows)
            .unwrap()
            .to_string();
        for expected in ["1000", "007", "ayya", "a[b]c", "| 3 ", "| 5 ", "| 2 "] {
            assert!(text.contains(expected), "{expected} in\n{text}");
        }
    }
}
