//! Dimension joins first: the inner join of a small, filtered input (a *dimension*) moved
//! down onto the input below it that holds the join's key, so that the rows the dimension
//! removes are never shuffled.
//!
//! DataFusion keeps a query's joins in the order of its `FROM` list. In TPC-H q7 the two
//! nations (`n_name` in two values) are joined last, above
//! `supplier ⋈ lineitem ⋈ orders ⋈ customer`: every line item of the two years meets its
//! order and its customer (hash-shuffled twice) before the nations keep 1 in 300 of them.
//! In one process dynamic filters make up for the order; a distributed plan has none (see
//! [`super::session_config`]). Joined on `c_nationkey` and `s_nationkey`, each nation can
//! instead be joined to the customer and supplier scans: a broadcast of a few rows into
//! the scan tasks, after which the orders' join and the line items' join take a
//! twelfth of the customers and of the suppliers.
//!
//! An inner join `P ⋈ D` moves when:
//!
//! - `D` is filtered (a `Filter`, or a scan with filters, anywhere in it) and its scans
//!   read at most `max_broadcast_bytes` of files (each table's scan is made, without the
//!   optimizer, to find out): a dimension, expected to remove rows and cheap to
//!   broadcast;
//! - the keys on `P`'s side all come from one input `A` found below `P` through
//!   projections that pass them on, filters and inner joins only — nodes under which an
//!   inner join with `D` gives the same rows before or after them — and no inner join on
//!   the way is with a dimension itself: that one is a small selective probe already,
//!   cheaper first (q2's `part`, whose join keeps 1 in 250 of `partsupp`; moving the
//!   supplier's region below it cost q2 15–20 ms).
//!
//! `A ⋈ D` then takes `A`'s place, the projections on the way up pass `D`'s columns on,
//! and a projection on top restores the join's columns in their order. The join's own
//! filter (q7's `n1.n_name = .. AND n2.n_name = .. OR ..`) goes to the lowest join on the
//! way up that has all its columns; where none has, the join stays (a `Filter` above the
//! projections would hold, but DataFusion 55's physical filter pushdown maps a
//! projection's columns by name and takes `n2.n_name` for `n1.n_name`: a wrong answer,
//! q7's shape in the tests below gave no rows that way). The answer is the same:
//! inner joins and filters commute, and a row of `A` meets `D` on its own columns alone.
//! The cost is an expectation, not a guarantee: `D` is probed by all of `A`'s rows instead
//! of `P`'s (a small hash table, in `A`'s tasks), and `D`'s columns ride through the joins
//! above `A`. Moved joins can make a larger dimension (a nation joined to its region
//! first, in q5 and q8), which is moved in turn — a few passes, until nothing moves.
//!
//! This runs on the optimized logical plan, before the physical one is made
//! ([`super::physical_plan_sized`]): sizing `D` needs its files listed, which an optimizer
//! rule cannot do. `dimension_joins = false` turns it off.

use std::cell::Cell;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{plan_err, Column, DFSchema, Result as DfResult};
use datafusion::datasource::source_as_provider;
use datafusion::execution::SessionState;
use datafusion::logical_expr::{Expr, Filter, Join, JoinType, LogicalPlan, Projection};
use datafusion::physical_plan::{StatisticsArgs, StatisticsContext};

use super::semi_joins::passes_on;

/// Passes over the plan at most: each moves the joins its dimensions allow, and a
/// join moved in one (a nation onto its region) can make a dimension for the next.
const MAX_PASSES: usize = 3;

/// `plan` with every dimension join moved as far down as the module documentation
/// allows; `max_bytes` is the most a dimension's files may hold.
pub async fn dimension_joins_first(
    plan: LogicalPlan,
    state: &SessionState,
    max_bytes: u64,
) -> DfResult<LogicalPlan> {
    // Nothing to size (or move) without an inner join of a filtered input: most
    // queries stop here, and no table is scanned twice.
    let mut joins_filtered = false;
    plan.apply_with_subqueries(|node| {
        if let LogicalPlan::Join(j) = node {
            if j.join_type == JoinType::Inner
                && !j.on.is_empty()
                && (filtered(&j.left) || filtered(&j.right))
            {
                joins_filtered = true;
                return Ok(TreeNodeRecursion::Stop);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    if !joins_filtered {
        return Ok(plan);
    }
    let mut sizes = Sizes {
        scans: HashMap::new(),
        max_bytes,
    };
    sizes.measure(&plan, state).await?;
    let mut plan = plan;
    let mut any = false;
    for _ in 0..MAX_PASSES {
        let moved = plan.transform_up_with_subqueries(|node| move_join(node, &sizes))?;
        plan = moved.data;
        if !moved.transformed {
            break;
        }
        any = true;
    }
    if any {
        // A semi join kept above a filtered dimension's join (q21's `EXISTS`) may now
        // go further down.
        plan = super::semi_joins::semi_joins_first(plan)?.data;
    }
    Ok(plan)
}

/// The bytes each table scan of a plan reads, for the size of any part of it.
struct Sizes {
    /// Per scan node: its files' bytes, or (a table in memory) its rows' estimated size.
    scans: HashMap<LogicalPlan, u64>,
    /// The most a small input may read.
    max_bytes: u64,
}

impl Sizes {
    /// Measures every scan of `plan` not measured yet: the table's own scan, without
    /// the optimizer (its files listed as the physical plan will list them again,
    /// from DataFusion's cache).
    async fn measure(&mut self, plan: &LogicalPlan, state: &SessionState) -> DfResult<()> {
        let mut scans = Vec::new();
        plan.apply_with_subqueries(|node| {
            if matches!(node, LogicalPlan::TableScan(_)) && !self.scans.contains_key(node) {
                scans.push(node.clone());
            }
            Ok(TreeNodeRecursion::Continue)
        })?;
        for node in scans {
            let LogicalPlan::TableScan(scan) = &node else {
                continue;
            };
            let provider = source_as_provider(&scan.source)?;
            let physical = provider
                .scan(state, scan.projection.as_ref(), &scan.filters, scan.fetch)
                .await?;
            let estimated = StatisticsContext::new()
                .compute(physical.as_ref(), &StatisticsArgs::new())?
                .total_byte_size
                .get_value()
                .copied()
                .unwrap_or(0) as u64;
            let bytes = super::scan_bytes(&physical).max(estimated);
            self.scans.insert(node, bytes);
        }
        Ok(())
    }

    /// Whether `plan` reads at most `max_bytes` (every scan in it measured).
    fn small(&self, plan: &LogicalPlan) -> bool {
        let mut total = 0u64;
        let mut known = true;
        let _ = plan.apply_with_subqueries(|node| {
            if matches!(node, LogicalPlan::TableScan(_)) {
                match self.scans.get(node) {
                    Some(bytes) => total = total.saturating_add(*bytes),
                    None => known = false,
                }
            }
            Ok(TreeNodeRecursion::Continue)
        });
        known && total <= self.max_bytes
    }

    /// Whether `plan` is a dimension: filtered and small.
    fn dimension(&self, plan: &LogicalPlan) -> bool {
        filtered(plan) && self.small(plan)
    }
}

/// Whether `join`'s left (or right) input is a dimension whose join with the other
/// could go further down.
fn movable(join: &Join, dimension_left: bool, sizes: &Sizes) -> bool {
    if join.join_type != JoinType::Inner || join.on.is_empty() || join.null_aware {
        return false;
    }
    let (d, p) = if dimension_left {
        (&join.left, &join.right)
    } else {
        (&join.right, &join.left)
    };
    sizes.dimension(d) && way_down(p, &key_columns(join, dimension_left), sizes).is_some()
}

/// The columns of the non-dimension side's keys.
fn key_columns(join: &Join, dimension_left: bool) -> HashSet<Column> {
    join.on
        .iter()
        .flat_map(|(l, r)| {
            let key = if dimension_left { r } else { l };
            key.column_refs().into_iter().cloned()
        })
        .collect()
}

/// Whether `plan` filters rows anywhere: a `Filter`, or a scan given filters.
fn filtered(plan: &LogicalPlan) -> bool {
    plan.exists(|node| {
        Ok(match node {
            LogicalPlan::Filter(_) => true,
            LogicalPlan::TableScan(scan) => !scan.filters.is_empty(),
            _ => false,
        })
    })
    .unwrap_or(false)
}

/// Which input of `node` a join on `needed` goes into (`Some(None)` for a single-input
/// node), or `None` if it lands on `node` itself. It passes a projection that passes
/// the keys on and a filter only on its way to a join below them (a filter right above
/// a scan stays below the join), and an inner join into the input holding the keys —
/// unless the other input is a dimension itself (q2's part): that join is a small,
/// selective probe already, cheaper to run first.
fn way_down(node: &LogicalPlan, needed: &HashSet<Column>, sizes: &Sizes) -> Option<Option<bool>> {
    match node {
        LogicalPlan::Projection(p)
            if needed.iter().all(|c| passes_on(p, c))
                && way_down(&p.input, needed, sizes).is_some() =>
        {
            Some(None)
        }
        LogicalPlan::Filter(f) if way_down(&f.input, needed, sizes).is_some() => Some(None),
        LogicalPlan::Join(j) if j.join_type == JoinType::Inner => {
            let into_left = if needed.iter().all(|c| j.left.schema().has_column(c)) {
                true
            } else if needed.iter().all(|c| j.right.schema().has_column(c)) {
                false
            } else {
                return None;
            };
            let other = if into_left { &j.right } else { &j.left };
            (!sizes.dimension(other)).then_some(Some(into_left))
        }
        _ => None,
    }
}

/// `node` with its dimension's join moved down, where it may go.
fn move_join(node: LogicalPlan, sizes: &Sizes) -> DfResult<Transformed<LogicalPlan>> {
    let LogicalPlan::Join(join) = &node else {
        return Ok(Transformed::no(node));
    };
    for dimension_left in [false, true] {
        if !movable(join, dimension_left, sizes) {
            continue;
        }
        // A join that cannot be rebuilt (a column name the way up already carries)
        // stays where it is.
        if let Ok(moved) = moved(join, dimension_left, sizes) {
            return Ok(Transformed::yes(moved));
        }
    }
    Ok(Transformed::no(node))
}

/// `join` with its dimension (left or right) joined below its other input.
fn moved(join: &Join, dimension_left: bool, sizes: &Sizes) -> DfResult<LogicalPlan> {
    let (d, p) = if dimension_left {
        (&join.left, &join.right)
    } else {
        (&join.right, &join.left)
    };
    let needed = key_columns(join, dimension_left);
    let d_columns: Vec<Expr> = d.schema().columns().into_iter().map(Expr::Column).collect();
    // The join's filter goes to the lowest join on the way up whose rows have its columns
    // (a filter of an inner join holds as well anywhere above it).
    let pending = Cell::new(join.filter.clone());
    let mut attach = |a: Arc<LogicalPlan>| -> DfResult<LogicalPlan> {
        let (left, right) = if dimension_left {
            (d.clone(), a)
        } else {
            (a, d.clone())
        };
        let mut landing = Join::try_new(
            left,
            right,
            join.on.clone(),
            None,
            JoinType::Inner,
            join.join_constraint,
            join.null_equality,
            false,
        )?;
        landing.filter = take_if_fits(&pending, &landing.schema);
        Ok(LogicalPlan::Join(landing))
    };
    let plan = rebuild(p, &needed, &d_columns, &mut attach, &pending, sizes)?;
    if pending.take().is_some() {
        // Not placed on a join: a `Filter` above the projections would do, but
        // DataFusion's physical filter pushdown maps a projection's columns by name and
        // confuses two of the same name (`n1.n_name`, `n2.n_name` in q7). Stay.
        return plan_err!("the join's filter has no join below it to go to");
    }
    // The join's columns, in its order.
    let columns = join
        .schema
        .columns()
        .into_iter()
        .map(Expr::Column)
        .collect::<Vec<_>>();
    Ok(LogicalPlan::Projection(Projection::try_new(
        columns,
        Arc::new(plan),
    )?))
}

/// The filter in `pending`, taken if every column it reads is in `schema`.
fn take_if_fits(pending: &Cell<Option<Expr>>, schema: &DFSchema) -> Option<Expr> {
    let filter = pending.take()?;
    if filter.column_refs().iter().all(|c| schema.has_column(c)) {
        Some(filter)
    } else {
        pending.set(Some(filter));
        None
    }
}

/// `node` rebuilt with `attach` applied to the input where the way down for `needed`
/// ends, `d_columns` passed on by the projections above it, and the `pending` filter
/// added to the first join on the way up that has its columns.
fn rebuild(
    node: &LogicalPlan,
    needed: &HashSet<Column>,
    d_columns: &[Expr],
    attach: &mut dyn FnMut(Arc<LogicalPlan>) -> DfResult<LogicalPlan>,
    pending: &Cell<Option<Expr>>,
    sizes: &Sizes,
) -> DfResult<LogicalPlan> {
    let mut below = |child: &Arc<LogicalPlan>| -> DfResult<Arc<LogicalPlan>> {
        Ok(Arc::new(if way_down(child, needed, sizes).is_some() {
            rebuild(child, needed, d_columns, attach, pending, sizes)?
        } else {
            attach(child.clone())?
        }))
    };
    match (node, way_down(node, needed, sizes)) {
        (LogicalPlan::Projection(p), Some(_)) => {
            let input = below(&p.input)?;
            let mut expr = p.expr.clone();
            expr.extend(d_columns.iter().cloned());
            Ok(LogicalPlan::Projection(Projection::try_new(expr, input)?))
        }
        (LogicalPlan::Filter(f), Some(_)) => Ok(LogicalPlan::Filter(Filter::try_new(
            f.predicate.clone(),
            below(&f.input)?,
        )?)),
        (LogicalPlan::Join(j), Some(Some(into_left))) => {
            let (left, right) = if into_left {
                (below(&j.left)?, j.right.clone())
            } else {
                (j.left.clone(), below(&j.right)?)
            };
            let mut rebuilt = Join::try_new(
                left,
                right,
                j.on.clone(),
                j.filter.clone(),
                j.join_type,
                j.join_constraint,
                j.null_equality,
                j.null_aware,
            )?;
            if let Some(extra) = take_if_fits(pending, &rebuilt.schema) {
                rebuilt.filter = Some(match rebuilt.filter.take() {
                    Some(own) => own.and(extra),
                    None => extra,
                });
            }
            Ok(LogicalPlan::Join(rebuilt))
        }
        _ => attach(Arc::new(node.clone())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::logical_expr::LogicalPlanBuilder;
    use datafusion::physical_plan::collect;
    use datafusion::prelude::{col, SessionContext};

    /// What a dimension may read here: any table but `l` (estimated sizes: in memory).
    const SMALL: u64 = 10_000;

    /// Tables shaped like TPC-H's supplier, lineitem, orders, customer and nation, with
    /// NULL keys and a nation no one is in.
    async fn session() -> SessionContext {
        let ctx = SessionContext::new();
        for sql in [
            "CREATE TABLE n (nk INT, name VARCHAR) AS VALUES \
             (1, 'FR'), (2, 'DE'), (3, 'IQ'), (4, 'XX'), (NULL, 'FR')",
            "CREATE TABLE s (sk INT, nk INT) AS VALUES (1, 1), (2, 2), (3, 3), (4, NULL), (5, 1)",
            "CREATE TABLE c (ck INT, nk INT) AS VALUES (1, 2), (2, 1), (3, 3), (4, NULL), (5, 2)",
            "CREATE TABLE o (ok INT, ck INT) AS VALUES \
             (10, 1), (11, 2), (12, 3), (13, 4), (14, 5), (15, NULL), (NULL, 1)",
            // Line items of orders no one placed pad it past `SMALL`.
            "CREATE TABLE l (ok INT, sk INT, v INT) AS SELECT * FROM (VALUES \
             (10, 1, 1), (10, 2, 2), (11, 5, 4), (11, 3, 8), (12, 1, 16), (13, 2, 32), \
             (14, 1, 64), (14, 5, 128), (15, 1, 256), (NULL, 2, 512), (12, NULL, 1024)) \
             UNION ALL SELECT CAST(1000 + value AS INT), CAST(value % 5 AS INT), 0 \
             FROM generate_series(1, 5000)",
        ] {
            ctx.sql(sql).await.unwrap().collect().await.unwrap();
        }
        ctx
    }

    /// The answer of `sql` (rows in order) and its plan, with or without the rewrite.
    async fn run(ctx: &SessionContext, sql: &str, rewrite: bool) -> (String, String) {
        let mut plan = ctx.sql(sql).await.unwrap().into_optimized_plan().unwrap();
        if rewrite {
            plan = dimension_joins_first(plan, &ctx.state(), SMALL)
                .await
                .unwrap();
        }
        let shown = plan.display_indent().to_string();
        (answer_of(ctx, plan).await, shown)
    }

    /// The rows `plan` gives, in order.
    async fn answer_of(ctx: &SessionContext, plan: LogicalPlan) -> String {
        let state = ctx.state();
        let physical = state
            .query_planner()
            .create_physical_plan(&plan, &state)
            .await
            .unwrap();
        let batches = collect(physical, ctx.task_ctx()).await.unwrap();
        datafusion::arrow::util::pretty::pretty_format_batches(&batches)
            .unwrap()
            .to_string()
    }

    /// The depth (in leading spaces) of the join whose line contains `on`.
    fn depth(plan: &str, on: &str) -> usize {
        let line = plan
            .lines()
            .find(|l| l.contains("Join:") && l.contains(on))
            .unwrap_or_else(|| panic!("no join on {on} in\n{plan}"));
        line.len() - line.trim_start().len()
    }

    #[tokio::test]
    async fn dimension_joins_move_down_with_the_same_answer() {
        let ctx = session().await;
        // q7's shape: two filtered nations joined last, with a filter over both.
        let q7 = "SELECT n1.name AS sn, n2.name AS cn, sum(v) FROM s, l, o, c, n n1, n n2 \
                  WHERE s.sk = l.sk AND o.ok = l.ok AND c.ck = o.ck AND s.nk = n1.nk \
                  AND c.nk = n2.nk AND ((n1.name = 'FR' AND n2.name = 'DE') \
                  OR (n1.name = 'DE' AND n2.name = 'FR')) GROUP BY 1, 2 ORDER BY 1, 2";
        let (expected, before) = run(&ctx, q7, false).await;
        let (answer, after) = run(&ctx, q7, true).await;
        assert_eq!(answer, expected, "{after}");
        assert!(
            expected.lines().count() > 4,
            "an answer with rows: {expected}"
        );
        // Before, the nations' joins are the outermost; after, each sits on its scan,
        // below the joins of orders and line items.
        assert!(
            depth(&before, "n2.nk") < depth(&before, "o.ck = c.ck"),
            "{before}"
        );
        assert!(
            depth(&after, "n2.nk") > depth(&after, "o.ck = c.ck"),
            "{after}"
        );
        assert!(
            depth(&after, "n1.nk") > depth(&after, "s.sk = l.sk"),
            "{after}"
        );

        let cases = [
            // A filtered dimension on a key passed up through a projection, with a
            // join filter that goes with it; and one under a further join.
            "SELECT o.ok, l.v, n.name FROM o JOIN l ON o.ok = l.ok JOIN c ON o.ck = c.ck \
             JOIN n ON c.nk = n.nk AND n.name <> c.ck::VARCHAR WHERE n.name IN ('DE', 'IQ') \
             ORDER BY 1, 2",
            // Keys from two inputs: stays.
            "SELECT l.v FROM l JOIN s ON l.sk = s.sk JOIN o ON l.ok = o.ok JOIN n \
             ON n.nk = s.nk AND n.nk = o.ck WHERE n.name <> 'XX' ORDER BY 1",
            // An unfiltered dimension: stays.
            "SELECT l.v, n.name FROM l JOIN s ON l.sk = s.sk JOIN n ON s.nk = n.nk ORDER BY 1",
            // A left join on the way: the dimension does not pass it.
            "SELECT l.v, n.name FROM l LEFT JOIN s ON l.sk = s.sk JOIN n ON s.nk = n.nk \
             WHERE n.name = 'FR' ORDER BY 1",
            // q2's shape: the join on the way is with a dimension itself (a small
            // selective probe already): stays.
            "SELECT o.ok, n.name FROM c JOIN o ON c.ck = o.ck JOIN n ON c.nk = n.nk \
             WHERE n.name = 'FR' AND o.ok > 12 ORDER BY 1",
        ];
        let mut moved = 0;
        for sql in cases {
            let (expected, before) = run(&ctx, sql, false).await;
            let (answer, after) = run(&ctx, sql, true).await;
            assert_eq!(answer, expected, "{sql}\n{after}");
            if before != after {
                moved += 1;
            }
        }
        assert_eq!(moved, 1, "the first moves, the others stay");
        // Without the filter on `o`, the same join moves onto `c`.
        let sql = "SELECT o.ok, n.name FROM c JOIN o ON c.ck = o.ck JOIN n ON c.nk = n.nk \
                   WHERE n.name = 'FR' ORDER BY 1";
        let (expected, before) = run(&ctx, sql, false).await;
        let (answer, after) = run(&ctx, sql, true).await;
        assert_eq!(answer, expected, "{after}");
        assert!(
            depth(&after, "n.nk") > depth(&after, "c.ck = o.ck"),
            "{before}\n{after}"
        );

        // The dimension on the left of its join (SQL's join order rarely puts it there).
        let state = ctx.state();
        let part = |sql: &'static str| {
            let ctx = ctx.clone();
            async move { ctx.sql(sql).await.unwrap().into_optimized_plan().unwrap() }
        };
        let d = part("SELECT nk, name FROM n WHERE name IN ('FR', 'IQ')").await;
        let p = part("SELECT l.v, s.nk FROM l JOIN s ON l.sk = s.sk").await;
        let plan = LogicalPlanBuilder::from(d)
            .join(p, JoinType::Inner, (vec!["n.nk"], vec!["s.nk"]), None)
            .unwrap()
            .project(vec![col("n.name"), col("l.v")])
            .unwrap()
            .sort(vec![
                col("l.v").sort(true, false),
                col("n.name").sort(true, false),
            ])
            .unwrap()
            .build()
            .unwrap();
        let moved = dimension_joins_first(plan.clone(), &state, SMALL)
            .await
            .unwrap();
        assert!(
            depth(&moved.display_indent().to_string(), "n.nk = s.nk")
                > depth(&moved.display_indent().to_string(), "l.sk = s.sk"),
            "{}",
            moved.display_indent()
        );
        assert_eq!(answer_of(&ctx, moved).await, answer_of(&ctx, plan).await);
    }

    #[tokio::test]
    async fn a_dimension_above_the_size_limit_stays() {
        let ctx = session().await;
        let sql = "SELECT l.v FROM l JOIN s ON l.sk = s.sk JOIN n ON s.nk = n.nk \
                   WHERE n.name = 'FR' ORDER BY 1";
        let state = ctx.state();
        let plan = ctx.sql(sql).await.unwrap().into_optimized_plan().unwrap();
        let kept = dimension_joins_first(plan.clone(), &state, 10)
            .await
            .unwrap();
        assert_eq!(kept, plan);
        let moved = dimension_joins_first(plan.clone(), &state, SMALL)
            .await
            .unwrap();
        assert_ne!(moved, plan);
    }
}
