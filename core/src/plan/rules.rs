//! Logical rewrites that keep a distributed plan's answer the one DataFusion gives in
//! one process.
//!
//! - [`WindowFilterToCase`]: a window aggregate's `FILTER (WHERE c)` has no encoding a task
//!   can read back (datafusion-proto 55 drops it, and DataFusion offers no accessor to
//!   carry it ourselves), so `agg(x) FILTER (WHERE c) OVER (...)` becomes
//!   `agg(CASE WHEN c THEN x END) OVER (...)` under its original name — the same answer
//!   for every aggregate that ignores NULL inputs. A filtered window aggregate that does
//!   not (`array_agg`, `first_value`, ...) is refused with a 400 rather than answered
//!   wrongly.

use datafusion::common::tree_node::Transformed;
use datafusion::common::{DataFusionError, Result as DfResult};
use datafusion::logical_expr::expr::{WindowFunction, WindowFunctionParams};
use datafusion::logical_expr::{when, Expr, LogicalPlan, Window, WindowFunctionDefinition};
use datafusion::optimizer::{OptimizerConfig, OptimizerRule};

/// Aggregates whose answer ignores NULL inputs: `FILTER (WHERE c)` is
/// `CASE WHEN c THEN x END` for them.
const NULL_IGNORING: &[&str] = &[
    "count",
    "sum",
    "avg",
    "mean",
    "min",
    "max",
    "bool_and",
    "bool_or",
    "every",
    "bit_and",
    "bit_or",
    "bit_xor",
    "stddev",
    "stddev_samp",
    "stddev_pop",
    "var",
    "var_samp",
    "var_pop",
    "var_population",
    "var_sample",
    "variance",
    "variance_samp",
    "variance_pop",
    "corr",
    "covar",
    "covar_samp",
    "covar_pop",
    "regr_slope",
    "regr_intercept",
    "regr_count",
    "regr_r2",
    "regr_avgx",
    "regr_avgy",
    "regr_sxx",
    "regr_syy",
    "regr_sxy",
    "approx_distinct",
    "approx_median",
    "median",
    "approx_percentile_cont",
    "approx_percentile_cont_with_weight",
    "percentile_cont",
    "string_agg",
];

/// See the [module docs](self).
#[derive(Debug, Default)]
pub struct WindowFilterToCase;

impl OptimizerRule for WindowFilterToCase {
    fn name(&self) -> &str {
        "lambdafusion_window_filter_to_case"
    }

    fn rewrite(
        &self,
        plan: LogicalPlan,
        _config: &dyn OptimizerConfig,
    ) -> DfResult<Transformed<LogicalPlan>> {
        plan.transform_up_with_subqueries(|node| {
            let LogicalPlan::Window(window) = node else {
                return Ok(Transformed::no(node));
            };
            if !window.window_expr.iter().any(has_filter) {
                return Ok(Transformed::no(LogicalPlan::Window(window)));
            }
            let exprs = window
                .window_expr
                .iter()
                .map(without_filter)
                .collect::<DfResult<Vec<_>>>()?;
            Ok(Transformed::yes(LogicalPlan::Window(Window::try_new(
                exprs,
                window.input.clone(),
            )?)))
        })
    }
}

fn window_function(expr: &Expr) -> Option<&WindowFunction> {
    match expr {
        Expr::WindowFunction(w) => Some(w),
        Expr::Alias(alias) => window_function(&alias.expr),
        _ => None,
    }
}

fn has_filter(expr: &Expr) -> bool {
    window_function(expr).is_some_and(|w| w.params.filter.is_some())
}

/// `expr` with its window aggregate's filter moved into its arguments, under its name.
fn without_filter(expr: &Expr) -> DfResult<Expr> {
    let Some(w) = window_function(expr).filter(|w| w.params.filter.is_some()) else {
        return Ok(expr.clone());
    };
    let name = expr.schema_name().to_string();
    let WindowFunctionDefinition::AggregateUDF(udaf) = &w.fun else {
        return Err(DataFusionError::NotImplemented(format!(
            "FILTER on window function {name} is not supported"
        )));
    };
    let fun = udaf.name().to_ascii_lowercase();
    if !NULL_IGNORING.contains(&fun.as_str()) {
        return Err(DataFusionError::NotImplemented(format!(
            "FILTER (WHERE ...) on the window function {fun} is not supported distributed \
             (only on aggregates that ignore NULL inputs, such as count, sum, avg, min, max): \
             {name}"
        )));
    }
    let condition = w.params.filter.as_deref().cloned().unwrap_or(Expr::Literal(
        datafusion::common::ScalarValue::Boolean(Some(true)),
        None,
    ));
    let literal = |e: &Expr| matches!(e, Expr::Literal(..));
    let wrap_all = fun == "count" || w.params.args.iter().all(literal);
    let args = w
        .params
        .args
        .iter()
        .map(|a| {
            if wrap_all || !literal(a) {
                when(condition.clone(), a.clone()).end()
            } else {
                Ok(a.clone())
            }
        })
        .collect::<DfResult<Vec<_>>>()?;
    let rewritten = Expr::WindowFunction(Box::new(WindowFunction {
        fun: w.fun.clone(),
        params: WindowFunctionParams {
            args,
            filter: None,
            ..w.params.clone()
        },
    }));
    Ok(rewritten.alias(name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::SessionContext;

    async fn answer(sql: &str, with_rule: bool) -> DfResult<String> {
        let mut builder = datafusion::execution::SessionStateBuilder::new().with_default_features();
        if with_rule {
            builder = builder.with_optimizer_rule(std::sync::Arc::new(WindowFilterToCase));
        }
        let ctx = SessionContext::new_with_state(builder.build());
        ctx.sql(
            "CREATE TABLE t (k INT, x INT) AS VALUES (1, 1), (1, NULL), (2, 5), (2, 7), (3, NULL)",
        )
        .await?;
        let batches = ctx.sql(sql).await?.collect().await?;
        Ok(datafusion::arrow::util::pretty::pretty_format_batches(&batches)?.to_string())
    }

    #[tokio::test]
    async fn filtered_window_aggregates_answer_as_before_under_their_names() {
        for sql in [
            "SELECT count(*) FILTER (WHERE NULL) OVER () FROM (VALUES (1)) t(x)",
            "SELECT k, x, count(*) FILTER (WHERE x > 1) OVER (PARTITION BY k) AS c FROM t ORDER BY k, x",
            "SELECT k, x, sum(x) FILTER (WHERE k <> 2) OVER (ORDER BY k, x), \
             max(x) FILTER (WHERE x < 6) OVER () FROM t ORDER BY k, x",
            "SELECT k, avg(x) FILTER (WHERE true) OVER (PARTITION BY k ORDER BY x \
             ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) FROM t ORDER BY k, x",
            "SELECT k, string_agg(CAST(x AS VARCHAR), ',') FILTER (WHERE x > 1) OVER (PARTITION BY k) \
             FROM t ORDER BY k",
        ] {
            let plain = answer(sql, false).await.unwrap();
            let rewritten = answer(sql, true).await.unwrap();
            assert_eq!(plain, rewritten, "{sql}");
        }
        let refused = answer(
            "SELECT array_agg(x) FILTER (WHERE k > 1) OVER () FROM t",
            true,
        )
        .await
        .unwrap_err();
        assert!(refused.to_string().contains("not supported"), "{refused}");
    }
}

/// The one value of a scalar subquery: an aggregate that answers NULL over no rows, the
/// value over one row, and fails with DataFusion's own message over more — so that
/// an uncorrelated scalar subquery, which the engine plans as a join (its in-process
/// form cannot cross stages), still refuses several rows instead of multiplying the
/// outer rows ([`ScalarSubqueryCardinality`]). Registered in every session, so that a
/// task decodes it by name.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct SingleValue {
    signature: datafusion::logical_expr::Signature,
}

/// The name [`SingleValue`] is registered under.
pub const SINGLE_VALUE: &str = "lambdafusion_scalar_subquery_value";

impl Default for SingleValue {
    fn default() -> Self {
        Self {
            signature: datafusion::logical_expr::Signature::any(
                1,
                datafusion::logical_expr::Volatility::Immutable,
            ),
        }
    }
}

impl datafusion::logical_expr::AggregateUDFImpl for SingleValue {
    fn name(&self) -> &str {
        SINGLE_VALUE
    }

    fn signature(&self) -> &datafusion::logical_expr::Signature {
        &self.signature
    }

    fn return_type(
        &self,
        arg_types: &[datafusion::arrow::datatypes::DataType],
    ) -> DfResult<datafusion::arrow::datatypes::DataType> {
        Ok(arg_types[0].clone())
    }

    fn accumulator(
        &self,
        args: datafusion::logical_expr::function::AccumulatorArgs,
    ) -> DfResult<Box<dyn datafusion::logical_expr::Accumulator>> {
        Ok(Box::new(SingleValueAccumulator {
            rows: 0,
            value: datafusion::common::ScalarValue::try_from(args.return_field.data_type())?,
        }))
    }

    fn state_fields(
        &self,
        args: datafusion::logical_expr::function::StateFieldsArgs,
    ) -> DfResult<Vec<datafusion::arrow::datatypes::FieldRef>> {
        use datafusion::arrow::datatypes::{DataType, Field};
        Ok(vec![
            std::sync::Arc::new(Field::new("rows", DataType::UInt64, false)),
            std::sync::Arc::new(Field::new(
                "value",
                args.return_field.data_type().clone(),
                true,
            )),
        ])
    }
}

/// Rows seen, and the first value.
#[derive(Debug)]
struct SingleValueAccumulator {
    rows: u64,
    value: datafusion::common::ScalarValue,
}

impl datafusion::logical_expr::Accumulator for SingleValueAccumulator {
    fn update_batch(&mut self, values: &[datafusion::arrow::array::ArrayRef]) -> DfResult<()> {
        let values = &values[0];
        if self.rows == 0 && !values.is_empty() {
            self.value = datafusion::common::ScalarValue::try_from_array(values, 0)?;
        }
        self.rows += values.len() as u64;
        Ok(())
    }

    fn merge_batch(&mut self, states: &[datafusion::arrow::array::ArrayRef]) -> DfResult<()> {
        use datafusion::arrow::array::AsArray;
        let rows = states[0].as_primitive::<datafusion::arrow::datatypes::UInt64Type>();
        for i in 0..rows.len() {
            let n = rows.value(i);
            if n > 0 && self.rows == 0 {
                self.value = datafusion::common::ScalarValue::try_from_array(&states[1], i)?;
            }
            self.rows += n;
        }
        Ok(())
    }

    fn state(&mut self) -> DfResult<Vec<datafusion::common::ScalarValue>> {
        Ok(vec![
            datafusion::common::ScalarValue::UInt64(Some(self.rows)),
            self.value.clone(),
        ])
    }

    fn evaluate(&mut self) -> DfResult<datafusion::common::ScalarValue> {
        if self.rows > 1 {
            return datafusion::common::exec_err!("Scalar subquery returned more than one row");
        }
        Ok(self.value.clone())
    }

    fn size(&self) -> usize {
        std::mem::size_of_val(self) + self.value.size()
    }
}

/// Wraps every uncorrelated scalar subquery's plan in a [`SingleValue`] aggregate (see
/// there), under the subquery's own column name. Runs as an analyzer rule: before the
/// optimizer turns the subqueries into joins.
#[derive(Debug, Default)]
pub struct ScalarSubqueryCardinality;

impl datafusion::optimizer::AnalyzerRule for ScalarSubqueryCardinality {
    fn name(&self) -> &str {
        "lambdafusion_scalar_subquery_cardinality"
    }

    fn analyze(
        &self,
        plan: LogicalPlan,
        _config: &datafusion::common::config::ConfigOptions,
    ) -> DfResult<LogicalPlan> {
        use datafusion::common::tree_node::TreeNode;
        plan.transform_up_with_subqueries(|node| {
            node.map_expressions(|expr| {
                expr.transform_up(|e| match e {
                    Expr::ScalarSubquery(subquery)
                        if subquery.outer_ref_columns.is_empty()
                            && !is_single_value(&subquery.subquery) =>
                    {
                        let wrapped = single_value_plan(&subquery.subquery)?;
                        Ok(Transformed::yes(Expr::ScalarSubquery(
                            subquery.with_plan(std::sync::Arc::new(wrapped)),
                        )))
                    }
                    other => Ok(Transformed::no(other)),
                })
            })
        })
        .map(|t| t.data)
    }
}

/// Whether `plan` already is a [`SingleValue`] aggregate.
fn is_single_value(plan: &LogicalPlan) -> bool {
    let plan = match plan {
        LogicalPlan::Projection(p) => p.input.as_ref(),
        other => other,
    };
    matches!(plan, LogicalPlan::Aggregate(a)
        if a.group_expr.is_empty()
            && a.aggr_expr.iter().any(|e| e.to_string().contains(SINGLE_VALUE)))
}

/// `plan` (one column) under a [`SingleValue`] aggregate keeping the column's name.
fn single_value_plan(plan: &LogicalPlan) -> DfResult<LogicalPlan> {
    use datafusion::logical_expr::{col, AggregateUDF, LogicalPlanBuilder};
    let schema = plan.schema();
    if schema.fields().len() != 1 {
        return Ok(plan.clone());
    }
    let (qualifier, field) = schema.qualified_field(0);
    let column = datafusion::common::Column::new(qualifier.cloned(), field.name());
    let udaf = std::sync::Arc::new(AggregateUDF::from(SingleValue::default()));
    let aggregate = udaf.call(vec![col(column)]).alias(field.name());
    LogicalPlanBuilder::from(plan.clone())
        .aggregate(Vec::<Expr>::new(), vec![aggregate])?
        .build()
}
