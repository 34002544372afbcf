//! [`SemiJoinsFirst`]: a semi or anti join applied below the inner joins that are not
//! expected to thin its rows out first, so that what it removes is never shuffled.
//!
//! DataFusion plans `WHERE o_orderkey IN (SELECT ...)` as a semi join on top of the
//! query's inner joins: in TPC-H q18 every order is joined to its customer and its
//! line items, and both are hash-shuffled, before the 9 order keys the subquery keeps
//! remove all but 63 rows. In one process its dynamic filters make up for that; a
//! distributed plan has none (see [`super::session_config`]). A semi join (or an anti
//! join) whose probe-side columns all come from one input `A` of an inner join
//! `A ⋈ B` gives the same rows applied to `A` first — whether an `A` row is kept depends
//! on that row alone — and it moves there when the inner join is not expected to
//! remove most of `A`'s rows more cheaply:
//!
//! - **the inner join is on the same key**: the semi join's keys are among the keys `A`
//!   is joined on, so both filter `A` on the same column, and the semi join probes each
//!   `A` row once instead of once per matching `B` row (line items per order);
//! - **`B` is a whole table**: a table scan with no filter (under projections and
//!   aliases only), which a join on a foreign key does not thin out.
//!
//! These are expectations, not guarantees: a `B` that lacks most of `A`'s keys leaves
//! the moved semi join more rows to probe than before — at most one hash probe per row
//! of `A`, where a selective semi join saves the shuffles and joins of all it removes.
//! A join through a filtered `B` (a nation named in q20 and q21) stays where it is: the
//! inner join may remove most rows more cheaply than the semi join. Null-aware anti
//! joins (`NOT IN`) stay too. Applied again where it lands, a semi join goes down as far
//! as these allow; after it, a small side is what the join switch broadcasts
//! ([`super::switch`]).

use std::collections::HashSet;
use std::sync::Arc;

use datafusion::common::tree_node::Transformed;
use datafusion::common::{Column, Result as DfResult};
use datafusion::logical_expr::{Expr, Join, JoinType, LogicalPlan, Projection};
use datafusion::optimizer::{OptimizerConfig, OptimizerRule};

/// See the module documentation.
#[derive(Debug, Default)]
pub struct SemiJoinsFirst;

impl OptimizerRule for SemiJoinsFirst {
    fn name(&self) -> &str {
        "lambdafusion_semi_joins_first"
    }

    fn supports_rewrite(&self) -> bool {
        true
    }

    fn rewrite(
        &self,
        plan: LogicalPlan,
        _config: &dyn OptimizerConfig,
    ) -> DfResult<Transformed<LogicalPlan>> {
        semi_joins_first(plan)
    }
}

/// `plan` with every semi and anti join moved down where it may go (the rule, outside
/// the optimizer: again after [`super::dimension_joins`] has moved inner joins, which can
/// open a way down that a filtered input closed).
pub fn semi_joins_first(plan: LogicalPlan) -> DfResult<Transformed<LogicalPlan>> {
    plan.transform_up_with_subqueries(push_down)
}

/// `node`, a semi or anti join moved below the inner join under it where it may go,
/// as far down as it may go.
fn push_down(node: LogicalPlan) -> DfResult<Transformed<LogicalPlan>> {
    let LogicalPlan::Join(semi) = &node else {
        return Ok(Transformed::no(node));
    };
    let probe_left = match semi.join_type {
        JoinType::LeftSemi | JoinType::LeftAnti => true,
        JoinType::RightSemi | JoinType::RightAnti => false,
        _ => return Ok(Transformed::no(node)),
    };
    if semi.null_aware {
        return Ok(Transformed::no(node));
    }
    let (probe, other) = if probe_left {
        (&semi.left, &semi.right)
    } else {
        (&semi.right, &semi.left)
    };
    // The probe side's columns the semi join reads: its keys and its filter's.
    let keys: Vec<&Expr> = semi
        .on
        .iter()
        .map(|(l, r)| if probe_left { l } else { r })
        .collect();
    let mut needed: HashSet<Column> = HashSet::new();
    for key in &keys {
        needed.extend(key.column_refs().into_iter().cloned());
    }
    if let Some(filter) = &semi.filter {
        needed.extend(
            filter
                .column_refs()
                .into_iter()
                .filter(|c| probe.schema().has_column(c))
                .cloned(),
        );
    }
    // Through projections that pass those columns on as they are.
    let mut projections: Vec<&Projection> = Vec::new();
    let mut below = probe.as_ref();
    while let LogicalPlan::Projection(p) = below {
        if !needed.iter().all(|c| passes_on(p, c)) {
            return Ok(Transformed::no(node));
        }
        projections.push(p);
        below = p.input.as_ref();
    }
    let LogicalPlan::Join(inner) = below else {
        return Ok(Transformed::no(node));
    };
    if inner.join_type != JoinType::Inner || inner.on.is_empty() {
        return Ok(Transformed::no(node));
    }
    let into_left = if needed.iter().all(|c| inner.left.schema().has_column(c)) {
        true
    } else if needed.iter().all(|c| inner.right.schema().has_column(c)) {
        false
    } else {
        return Ok(Transformed::no(node));
    };
    let (a, b) = if into_left {
        (&inner.left, &inner.right)
    } else {
        (&inner.right, &inner.left)
    };
    let same_key = keys.iter().all(|key| {
        inner
            .on
            .iter()
            .any(|(l, r)| *key == if into_left { l } else { r })
    });
    if !same_key && !whole_table(b) {
        return Ok(Transformed::no(node));
    }
    // The semi join over `a`, pushed further where it may go.
    let (left, right) = if probe_left {
        (a.clone(), other.clone())
    } else {
        (other.clone(), a.clone())
    };
    let moved = Join::try_new(
        left,
        right,
        semi.on.clone(),
        semi.filter.clone(),
        semi.join_type,
        semi.join_constraint,
        semi.null_equality,
        false,
    )?;
    let moved = Arc::new(push_down(LogicalPlan::Join(moved))?.data);
    let (left, right) = if into_left {
        (moved, inner.right.clone())
    } else {
        (inner.left.clone(), moved)
    };
    let mut plan = LogicalPlan::Join(Join::try_new(
        left,
        right,
        inner.on.clone(),
        inner.filter.clone(),
        JoinType::Inner,
        inner.join_constraint,
        inner.null_equality,
        false,
    )?);
    for p in projections.iter().rev() {
        plan = LogicalPlan::Projection(Projection::try_new(p.expr.clone(), Arc::new(plan))?);
    }
    Ok(Transformed::yes(plan))
}

/// Whether projection `p` outputs column `c` as the same column of its input.
pub(crate) fn passes_on(p: &Projection, c: &Column) -> bool {
    p.expr
        .iter()
        .any(|e| matches!(e, Expr::Column(col) if col == c))
}

/// Whether `plan` is a whole table: a scan with no filter and no limit, under
/// projections and aliases only.
fn whole_table(plan: &LogicalPlan) -> bool {
    match plan {
        LogicalPlan::Projection(p) => whole_table(&p.input),
        LogicalPlan::SubqueryAlias(a) => whole_table(&a.input),
        LogicalPlan::TableScan(scan) => scan.filters.is_empty() && scan.fetch.is_none(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::SessionContext;

    /// A session with three small tables shaped like TPC-H's customer, orders and
    /// lineitem (with NULL keys), with or without the rule.
    async fn session(with_rule: bool) -> SessionContext {
        let mut builder = datafusion::execution::SessionStateBuilder::new().with_default_features();
        if with_rule {
            builder = builder.with_optimizer_rule(Arc::new(SemiJoinsFirst));
        }
        let ctx = SessionContext::new_with_state(builder.build());
        for sql in [
            "CREATE TABLE c (ck INT, name VARCHAR) AS VALUES (1, 'a'), (2, 'b'), (3, 'c'), (NULL, 'n')",
            "CREATE TABLE o (ok INT, ck INT, price INT) AS VALUES \
             (10, 1, 100), (11, 1, 50), (12, 2, 70), (13, 3, 20), (14, NULL, 5), (NULL, 2, 1)",
            "CREATE TABLE l (ok INT, q INT, s INT) AS VALUES \
             (10, 5, 1), (10, 7, 2), (11, 1, 1), (12, 9, 3), (12, 9, 1), (13, 1, 2), \
             (14, 30, 1), (NULL, 40, 2), (15, 50, 3)",
        ] {
            ctx.sql(sql).await.unwrap().collect().await.unwrap();
        }
        ctx
    }

    async fn run(ctx: &SessionContext, sql: &str) -> (String, String) {
        let df = ctx.sql(sql).await.unwrap();
        let plan = df
            .clone()
            .into_optimized_plan()
            .unwrap()
            .display_indent()
            .to_string();
        let batches = df.collect().await.unwrap();
        let rows = datafusion::arrow::util::pretty::pretty_format_batches(&batches)
            .unwrap()
            .to_string();
        (rows, plan)
    }

    /// Lines of an optimized plan, each trimmed, for the order of its joins.
    fn joins(plan: &str) -> Vec<String> {
        plan.lines()
            .map(str::trim)
            .filter(|l| l.contains("Join"))
            .map(|l| l.split(':').next().unwrap().to_string())
            .collect()
    }

    #[tokio::test]
    async fn semi_and_anti_joins_move_down_with_the_same_answer() {
        let (plain, with) = (session(false).await, session(true).await);
        // q18's shape: IN over the join on its key, then through a whole table.
        let q18 = "SELECT name, c.ck, o.ok, price, sum(q) FROM c, o, l \
                   WHERE o.ok IN (SELECT ok FROM l GROUP BY ok HAVING sum(q) > 10) \
                   AND c.ck = o.ck AND o.ok = l.ok GROUP BY name, c.ck, o.ok, price \
                   ORDER BY o.ok";
        let cases = [
            (q18, true),
            // EXISTS with a filter on the probe side's columns; NOT EXISTS likewise.
            (
                "SELECT o.ok, l.q FROM o JOIN l ON o.ok = l.ok WHERE EXISTS \
              (SELECT 1 FROM l l2 WHERE l2.ok = o.ok AND l2.s <> o.ck) ORDER BY 1, 2",
                true,
            ),
            (
                "SELECT o.ok, l.q FROM o JOIN l ON o.ok = l.ok WHERE NOT EXISTS \
              (SELECT 1 FROM l l2 WHERE l2.ok = o.ok AND l2.q > 8) ORDER BY 1, 2",
                true,
            ),
            // Through a filtered side on another key: stays.
            (
                "SELECT o.ok FROM o JOIN c ON o.ck = c.ck WHERE c.name <> 'c' AND o.ok IN \
              (SELECT ok FROM l WHERE q > 6) ORDER BY 1",
                false,
            ),
            // NOT IN (null-aware): stays.
            (
                "SELECT o.ok FROM o JOIN l ON o.ok = l.ok WHERE o.ok NOT IN \
              (SELECT ok FROM l WHERE q > 8) ORDER BY 1",
                false,
            ),
        ];
        for (sql, moves) in cases {
            let (expected, before) = run(&plain, sql).await;
            let (answer, after) = run(&with, sql).await;
            assert_eq!(answer, expected, "{sql}\n{after}");
            let (b, a) = (joins(&before), joins(&after));
            assert_eq!(b.len(), a.len(), "{before}\n{after}");
            if moves {
                // The semi or anti join was the outermost join and is no longer.
                assert!(!b[0].starts_with("Inner"), "{before}");
                assert!(a[0].starts_with("Inner"), "{sql}\n{after}");
            } else {
                assert_eq!(a, b, "{sql}\n{after}");
            }
        }
        // q18's goes below both inner joins, onto the orders scan.
        let (_, after) = run(&with, q18).await;
        let a = joins(&after);
        assert!(
            a[0].starts_with("Inner") && a[1].starts_with("Inner"),
            "{after}"
        );
        assert!(a[2].starts_with("LeftSemi"), "{after}");
    }
}
