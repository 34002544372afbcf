//! What a statement's text may be before it is planned, where planning runs, and what a
//! planned statement may do.
//!
//! - [`check_text`]: a statement's shape, read off its tokens without recursion, must fit
//!   well inside the depth limit before the parser builds a tree of it (a left-deep chain
//!   such as `a+a+...+a` parses in a loop, but every later pass over it recurses).
//! - [`measure`]: the parsed statement's depth — nested expressions, subqueries, set
//!   operations, joined tables — and size; past [`EngineConfig::max_sql_depth`] it is
//!   refused with a 400 naming the limit, so no later pass (planning, optimizing,
//!   encoding, running in a task) can run out of stack or time on it.
//! - [`off_thread`]: planning runs on a thread of its own, with a stack that fits the
//!   depth limit many times over, under a time budget; a panic there is an error, never
//!   the end of the process.
//! - [`verdict`]: what a planned statement is, decided on the whole plan tree: a query,
//!   an `EXPLAIN [ANALYZE]` of one, catalog DDL or `SHOW`/`DESCRIBE`. A write, COPY, DDL
//!   or `SET` anywhere in the tree (under `EXPLAIN ANALYZE`, in a CTE, in a subquery) is
//!   refused exactly as the bare statement is.

use std::ops::ControlFlow;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::logical_expr::{DdlStatement, LogicalPlan};
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::{
    Expr, Query, Select, SetExpr, Statement as SqlStatement, Visit, Visitor,
};
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
use tokio::sync::Semaphore;

use crate::{EngineConfig, Error, Result};

/// How much deeper the token estimate of [`check_text`] may be than the depth limit: the
/// estimate counts every operator of a chain, and a chain of `a = 1 AND b BETWEEN 1 AND 2`
/// nests about a third as deep as its operators; past this, the statement cannot be
/// within the limit, and is not parsed at all.
const TOKEN_ESTIMATE_SLACK: usize = 4;

/// The stack of a planning thread. DataFusion's planner and optimizer take up to about
/// 10 KiB per level of nesting in a debug build; the default depth limit (1,000) needs
/// about 10 MiB of it, and the parser's tree, four times deeper at most, is walked and
/// dropped in much smaller frames. Only the pages a statement touches are ever mapped.
pub const PLANNING_STACK_BYTES: usize = 256 * 1024 * 1024;

/// The shape of a parsed statement, as [`measure`] found it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Shape {
    /// Deepest nesting: expressions within expressions, subqueries, set operations
    /// (`UNION` chains) and joined tables each add a level.
    pub depth: usize,
    /// Expressions in all.
    pub expressions: usize,
}

/// Refuses text whose nesting, estimated from its tokens, is far past
/// `config.max_sql_depth`, before anything recursive (the parser's tree, its drop, any
/// pass over it) sees it. Also refuses what does not tokenize, with the tokenizer's
/// message. See [`measure`] for the exact check after parsing.
pub fn check_text(sql: &str, config: &EngineConfig) -> Result<()> {
    let tokens = Tokenizer::new(&GenericDialect {}, sql)
        .tokenize()
        .map_err(|e| Error::InvalidInput(format!("SQL error: {e}")))?;
    let estimate = token_depth(&tokens);
    let ceiling = config.max_sql_depth.saturating_mul(TOKEN_ESTIMATE_SLACK);
    if estimate > ceiling {
        return Err(depth_error(estimate, config, "at least "));
    }
    Ok(())
}

/// One bracketed group of tokens as [`token_depth`] reads it.
#[derive(Default, Clone, Copy)]
struct Group {
    /// Operators of the current list item (a comma starts the next).
    ops: usize,
    /// The deepest bracketed operand of the current item.
    operand: usize,
    /// The deepest finished item.
    items: usize,
    /// Operators chaining the group's parts across its commas (set operations, joins).
    chain: usize,
}

impl Group {
    /// How deep the group nests so far: a chain of `n` operators nests at most `n`
    /// levels over its deepest operand, whatever their precedence.
    fn depth(&self) -> usize {
        self.items.max(self.ops + self.operand) + self.chain
    }
}

/// An upper bound of how deep the tree of `tokens` can nest, found without recursion:
/// each bracketed group nests one level over its deepest list item, an item as many
/// levels over its deepest operand as it has operators.
fn token_depth(tokens: &[Token]) -> usize {
    let mut open: Vec<Group> = vec![Group::default()];
    for token in tokens {
        match token {
            Token::LParen | Token::LBracket | Token::LBrace => open.push(Group::default()),
            Token::RParen | Token::RBracket | Token::RBrace if open.len() > 1 => {
                let closed = open.pop().unwrap_or_default().depth() + 1;
                if let Some(parent) = open.last_mut() {
                    parent.operand = parent.operand.max(closed);
                }
            }
            Token::Comma => {
                if let Some(group) = open.last_mut() {
                    group.items = group.items.max(group.ops + group.operand);
                    group.ops = 0;
                    group.operand = 0;
                }
            }
            Token::Word(word) => {
                if let Some(group) = open.last_mut() {
                    match word.keyword {
                        Keyword::UNION | Keyword::EXCEPT | Keyword::INTERSECT | Keyword::JOIN => {
                            group.chain += 1
                        }
                        Keyword::AND
                        | Keyword::OR
                        | Keyword::XOR
                        | Keyword::LIKE
                        | Keyword::ILIKE
                        | Keyword::IS
                        | Keyword::COLLATE
                        | Keyword::AT => group.ops += 1,
                        _ => {}
                    }
                }
            }
            t if is_operator(t) => {
                if let Some(group) = open.last_mut() {
                    group.ops += 1;
                }
            }
            _ => {}
        }
    }
    // Groups left open (the parser will refuse them) close here.
    let mut depth = 0;
    while let Some(mut group) = open.pop() {
        group.operand = group.operand.max(depth);
        depth = group.depth() + usize::from(!open.is_empty());
    }
    depth
}

/// Symbols that join two operands (or follow one: `::`, `[`, `->`).
fn is_operator(token: &Token) -> bool {
    !matches!(
        token,
        Token::EOF
            | Token::Word(_)
            | Token::Number(..)
            | Token::Char(_)
            | Token::Whitespace(_)
            | Token::Comma
            | Token::Period
            | Token::SemiColon
            | Token::LParen
            | Token::RParen
            | Token::LBracket
            | Token::RBracket
            | Token::LBrace
            | Token::RBrace
            | Token::Placeholder(_)
    ) && !is_literal(token)
}

fn is_literal(token: &Token) -> bool {
    matches!(
        token,
        Token::SingleQuotedString(_)
            | Token::DoubleQuotedString(_)
            | Token::TripleSingleQuotedString(_)
            | Token::TripleDoubleQuotedString(_)
            | Token::DollarQuotedString(_)
            | Token::SingleQuotedByteStringLiteral(_)
            | Token::DoubleQuotedByteStringLiteral(_)
            | Token::TripleSingleQuotedByteStringLiteral(_)
            | Token::TripleDoubleQuotedByteStringLiteral(_)
            | Token::SingleQuotedRawStringLiteral(_)
            | Token::DoubleQuotedRawStringLiteral(_)
            | Token::TripleSingleQuotedRawStringLiteral(_)
            | Token::TripleDoubleQuotedRawStringLiteral(_)
            | Token::NationalStringLiteral(_)
            | Token::QuoteDelimitedStringLiteral(_)
            | Token::NationalQuoteDelimitedStringLiteral(_)
            | Token::EscapedStringLiteral(_)
            | Token::UnicodeStringLiteral(_)
            | Token::HexStringLiteral(_)
    )
}

fn depth_error(depth: usize, config: &EngineConfig, qualifier: &str) -> Error {
    Error::InvalidInput(format!(
        "the statement nests {qualifier}{depth} levels deep (expressions within \
         expressions, subqueries, UNION/EXCEPT/INTERSECT chains and joined tables each \
         add one); at most {} are accepted (max_sql_depth): split a long chain of \
         operators into a list (x IN (...)), a CASE or several statements",
        config.max_sql_depth
    ))
}

/// Measures a parsed statement (see [`Shape`]) and refuses it past
/// `config.max_sql_depth`. The walk recurses as deep as the statement nests, which
/// [`check_text`] has bounded.
pub fn measure(statement: &DfStatement, config: &EngineConfig) -> Result<Shape> {
    let mut depth = DepthVisitor::default();
    visit_statement(statement, &mut depth);
    let shape = Shape {
        depth: depth.deepest,
        expressions: depth.expressions,
    };
    if shape.depth > config.max_sql_depth {
        return Err(depth_error(shape.depth, config, ""));
    }
    Ok(shape)
}

fn visit_statement(statement: &DfStatement, visitor: &mut DepthVisitor) {
    match statement {
        DfStatement::Statement(s) => {
            let _ = SqlStatement::visit(s, visitor);
        }
        DfStatement::CopyTo(copy) => {
            if let datafusion::sql::parser::CopyToSource::Query(q) = &copy.source {
                let _ = Query::visit(q, visitor);
            }
        }
        DfStatement::Explain(explain) => visit_statement(&explain.statement, visitor),
        DfStatement::CreateExternalTable(_) | DfStatement::Reset(_) => {}
    }
}

/// Tracks the nesting of a statement's tree as the visitor walks it.
#[derive(Default)]
struct DepthVisitor {
    current: usize,
    deepest: usize,
    expressions: usize,
    /// Levels each open query or select added, removed again on leaving it.
    added: Vec<usize>,
}

impl DepthVisitor {
    fn enter(&mut self, levels: usize) {
        self.current += levels;
        self.added.push(levels);
        self.deepest = self.deepest.max(self.current);
    }

    fn leave(&mut self) {
        self.current -= self.added.pop().unwrap_or(0);
    }
}

impl Visitor for DepthVisitor {
    type Break = ();

    fn pre_visit_query(&mut self, query: &Query) -> ControlFlow<()> {
        // A chain of set operations is planned as deep as it is long.
        let mut chain = 0usize;
        let mut body = query.body.as_ref();
        while let SetExpr::SetOperation { left, .. } = body {
            chain += 1;
            body = left.as_ref();
        }
        self.enter(1 + chain);
        ControlFlow::Continue(())
    }

    fn post_visit_query(&mut self, _query: &Query) -> ControlFlow<()> {
        self.leave();
        ControlFlow::Continue(())
    }

    fn pre_visit_select(&mut self, select: &Select) -> ControlFlow<()> {
        // `FROM a, b JOIN c ...` is planned as a left-deep tree of joins.
        let tables: usize = select.from.iter().map(|t| 1 + t.joins.len()).sum();
        self.enter(tables.saturating_sub(1));
        ControlFlow::Continue(())
    }

    fn post_visit_select(&mut self, _select: &Select) -> ControlFlow<()> {
        self.leave();
        ControlFlow::Continue(())
    }

    fn pre_visit_expr(&mut self, _expr: &Expr) -> ControlFlow<()> {
        self.expressions += 1;
        self.enter(1);
        ControlFlow::Continue(())
    }

    fn post_visit_expr(&mut self, _expr: &Expr) -> ControlFlow<()> {
        self.leave();
        ControlFlow::Continue(())
    }
}

/// Planning threads that may run at once (one per core, at least two); a statement
/// waits for one within its budget.
fn planners() -> &'static Arc<Semaphore> {
    static PLANNERS: OnceLock<Arc<Semaphore>> = OnceLock::new();
    PLANNERS.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        Arc::new(Semaphore::new(cores.max(2)))
    })
}

/// Runs `work` (planning a statement) on a thread of its own with a
/// [`PLANNING_STACK_BYTES`] stack, driving its I/O on the current tokio runtime, and
/// waits at most `budget` for it. Past the budget the caller gets a 400 naming
/// `setting` and the thread's late result is dropped (nothing it planned is recorded:
/// recording happens after this returns). A panic in `work` becomes an error.
pub async fn off_thread<T, F, Fut>(budget: Duration, setting: &str, work: F) -> Result<T>
where
    T: Send + 'static,
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<T>>,
{
    let started = tokio::time::Instant::now();
    let deadline = started + budget;
    let too_slow = || {
        Error::InvalidInput(format!(
            "planning the statement took longer than {:.1} s ({setting}); simplify it",
            budget.as_secs_f64()
        ))
    };
    let permit = match tokio::time::timeout_at(deadline, planners().clone().acquire_owned()).await {
        Ok(Ok(permit)) => permit,
        Ok(Err(_)) => return Err(Error::Internal("the planning threads are closed".into())),
        Err(_) => {
            return Err(Error::Overloaded {
                message: "every planning thread is busy; try again shortly".into(),
                retry_after: Duration::from_secs(1),
            })
        }
    };
    let runtime = tokio::runtime::Handle::current();
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("lambdafusion-planner".into())
        .stack_size(PLANNING_STACK_BYTES)
        .spawn(move || {
            let _permit = permit;
            let outcome =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| runtime.block_on(work())));
            let _ = tx.send(outcome);
        })
        .map_err(|e| Error::Internal(format!("cannot start a planning thread: {e}")))?;
    match tokio::time::timeout_at(deadline, rx).await {
        Ok(Ok(Ok(result))) => result,
        Ok(Ok(Err(panic))) => {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown panic".into());
            Err(Error::Internal(format!("planning failed: {message}")))
        }
        Ok(Err(_)) => Err(Error::Internal("the planning thread ended early".into())),
        Err(_) => Err(too_slow()),
    }
}

/// What a planned statement is, and so where it goes.
#[derive(Debug)]
pub enum Verdict<'a> {
    /// A read-only query: distributed.
    Query(&'a LogicalPlan),
    /// `EXPLAIN ANALYZE` of a read-only query: distributed, its tasks recording metrics.
    Analyze(&'a LogicalPlan),
    /// `EXPLAIN` of a read-only query: answered by the scheduler.
    Explain(&'a LogicalPlan),
    /// `CREATE TABLE name AS query` of a read-only query: a write ([`Verdict::Write`])
    /// whose commit also creates the catalog table.
    CreateTableAs(&'a datafusion::logical_expr::CreateMemoryTable),
    /// `EXPLAIN COPY ...`: the plan of the write, answered by the scheduler; nothing is
    /// written.
    ExplainWrite(&'a datafusion::logical_expr::dml::CopyTo),
    /// `COPY (query) TO 'location'` of a read-only query: distributed, its final stage
    /// writing files ([`crate::write`]).
    Write(&'a datafusion::logical_expr::dml::CopyTo),
    /// `INSERT INTO table query` of a read-only query: a write appending to a (Delta)
    /// table ([`crate::write::delta`]).
    Insert(&'a datafusion::logical_expr::dml::DmlStatement),
    /// `EXPLAIN INSERT INTO ...`: the plan of the append, answered by the scheduler;
    /// nothing is written.
    ExplainInsert(&'a datafusion::logical_expr::dml::DmlStatement),
    /// `CREATE EXTERNAL TABLE` or `DROP TABLE`: the catalog.
    Catalog,
    /// `DESCRIBE`, `SHOW TABLES` and other `information_schema` reads: answered by the
    /// scheduler, bounded.
    Metadata,
}

/// Decides what `plan` is. Writes other than a bare `COPY`, DDL other than the
/// catalog's and other statements are refused wherever they stand in the tree, with the
/// same message as the bare statement.
pub fn verdict(plan: &LogicalPlan) -> Result<Verdict<'_>> {
    match plan {
        LogicalPlan::Ddl(DdlStatement::CreateMemoryTable(create)) => {
            read_only(&create.input)?;
            if reads_information_schema(&create.input) {
                return Err(Error::InvalidInput(
                    "CREATE TABLE ... AS cannot read information_schema: it is answered by \
                     the scheduler, not read by tasks"
                        .into(),
                ));
            }
            Ok(Verdict::CreateTableAs(create))
        }
        LogicalPlan::Copy(copy) => {
            read_only(&copy.input)?;
            if reads_information_schema(&copy.input) {
                return Err(Error::InvalidInput(
                    "COPY cannot write information_schema: it is answered by the scheduler, \
                     not read by tasks"
                        .into(),
                ));
            }
            Ok(Verdict::Write(copy))
        }
        LogicalPlan::Dml(dml) if appends(dml) => {
            checked_insert(dml)?;
            Ok(Verdict::Insert(dml))
        }
        LogicalPlan::Ddl(DdlStatement::CreateExternalTable(_))
        | LogicalPlan::Ddl(DdlStatement::DropTable(_))
        | LogicalPlan::Ddl(DdlStatement::CreateView(_))
        | LogicalPlan::Ddl(DdlStatement::DropView(_)) => Ok(Verdict::Catalog),
        LogicalPlan::DescribeTable(_) => Ok(Verdict::Metadata),
        LogicalPlan::Analyze(analyze) => {
            read_only(&analyze.input)?;
            Ok(Verdict::Analyze(&analyze.input))
        }
        LogicalPlan::Explain(explain) => {
            if let LogicalPlan::Dml(dml) = explain.plan.as_ref() {
                if appends(dml) {
                    checked_insert(dml)?;
                    return Ok(Verdict::ExplainInsert(dml));
                }
            }
            if let LogicalPlan::Copy(copy) = explain.plan.as_ref() {
                read_only(&copy.input)?;
                if !reads_information_schema(&copy.input) {
                    return Ok(Verdict::ExplainWrite(copy));
                }
            }
            read_only(&explain.plan)?;
            Ok(Verdict::Explain(&explain.plan))
        }
        other => {
            read_only(other)?;
            if reads_information_schema(other) {
                Ok(Verdict::Metadata)
            } else {
                Ok(Verdict::Query(other))
            }
        }
    }
}

/// Whether `dml` is `INSERT INTO` (an append).
fn appends(dml: &datafusion::logical_expr::dml::DmlStatement) -> bool {
    dml.op
        == datafusion::logical_expr::WriteOp::Insert(
            datafusion::logical_expr::dml::InsertOp::Append,
        )
}

/// Refuses an `INSERT INTO` whose query writes or reads `information_schema`.
fn checked_insert(dml: &datafusion::logical_expr::dml::DmlStatement) -> Result<()> {
    read_only(&dml.input)?;
    if reads_information_schema(&dml.input) {
        return Err(Error::InvalidInput(
            "INSERT INTO cannot read information_schema: it is answered by the scheduler, \
             not read by tasks"
                .into(),
        ));
    }
    Ok(())
}

/// Refuses the query under a view unless it only reads, and reads no `information_schema`
/// (answered by the scheduler, it cannot run inside a query's stages).
pub fn read_only_view(plan: &LogicalPlan) -> Result<()> {
    read_only(plan)?;
    if reads_information_schema(plan) {
        return Err(Error::InvalidInput(
            "a view cannot read information_schema: query it directly".into(),
        ));
    }
    Ok(())
}

/// Refuses `plan` if any node of it, subqueries included, writes, changes the catalog or
/// the session, or explains.
fn read_only(plan: &LogicalPlan) -> Result<()> {
    let mut refusal = None;
    plan.apply_with_subqueries(|node| {
        refusal = refused(node);
        Ok(if refusal.is_some() {
            TreeNodeRecursion::Stop
        } else {
            TreeNodeRecursion::Continue
        })
    })?;
    refusal.map_or(Ok(()), Err)
}

/// The refusal of one plan node, if it is not part of a read-only query.
fn refused(node: &LogicalPlan) -> Option<Error> {
    Some(Error::InvalidInput(match node {
        LogicalPlan::Dml(dml) => match dml.op {
            datafusion::logical_expr::WriteOp::Insert(
                datafusion::logical_expr::dml::InsertOp::Append,
            ) => "INSERT INTO is a statement of its own: it cannot be nested or analyzed \
                  (EXPLAIN INSERT shows its plan)"
                .to_string(),
            datafusion::logical_expr::WriteOp::Insert(_) => {
                "INSERT OVERWRITE and REPLACE INTO are not supported: INSERT INTO appends to a \
                 Delta table; CREATE TABLE ... AS and COPY write new locations"
                    .to_string()
            }
            _ => "UPDATE and DELETE are not supported: lambdafusion appends (INSERT INTO a \
                  Delta table) and writes new tables (CREATE TABLE ... AS, COPY)"
                .to_string(),
        },
        LogicalPlan::Copy(_) => {
            "COPY is a statement of its own: it cannot be explained or nested".to_string()
        }
        LogicalPlan::Ddl(DdlStatement::CreateExternalTable(_))
        | LogicalPlan::Ddl(DdlStatement::DropTable(_))
        | LogicalPlan::Ddl(DdlStatement::CreateView(_))
        | LogicalPlan::Ddl(DdlStatement::DropView(_)) => {
            "CREATE EXTERNAL TABLE, DROP TABLE, CREATE VIEW and DROP VIEW are statements of \
             their own: they cannot be explained or nested"
                .to_string()
        }
        LogicalPlan::Ddl(DdlStatement::CreateMemoryTable(_)) => {
            "CREATE TABLE ... AS is a statement of its own: it cannot be explained or nested"
                .to_string()
        }
        LogicalPlan::Ddl(other) => format!(
            "{} is not supported: the catalog holds external tables \
             (CREATE EXTERNAL TABLE ... STORED AS PARQUET|CSV|JSON LOCATION '...'), tables \
             written by a query (CREATE TABLE ... AS SELECT ...) and views \
             (CREATE VIEW ... AS SELECT ...)",
            other.name()
        ),
        LogicalPlan::Statement(datafusion::logical_expr::Statement::SetVariable(_)) => {
            "SET is not supported: every query runs with the engine's settings (time zone \
             UTC, NULLs last ascending and first descending, floats parsed as floats); write \
             AT TIME ZONE, NULLS FIRST/LAST or a CAST in the query instead"
                .to_string()
        }
        LogicalPlan::Statement(s) => format!("{} statements are not supported", s.name()),
        LogicalPlan::Explain(_) | LogicalPlan::Analyze(_) => {
            "EXPLAIN can only stand at the start of a statement".to_string()
        }
        LogicalPlan::DescribeTable(_) => {
            "DESCRIBE is a statement of its own: it cannot be explained or nested".to_string()
        }
        _ => return None,
    }))
}

/// Whether `plan` reads an `information_schema` table.
fn reads_information_schema(plan: &LogicalPlan) -> bool {
    let mut found = false;
    let _ = plan.apply_with_subqueries(|node| {
        if let LogicalPlan::TableScan(scan) = node {
            if scan.table_name.schema() == Some("information_schema") {
                found = true;
                return Ok(TreeNodeRecursion::Stop);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    });
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn estimate(sql: &str) -> usize {
        let tokens = Tokenizer::new(&GenericDialect {}, sql).tokenize().unwrap();
        token_depth(&tokens)
    }

    fn shape(sql: &str) -> Shape {
        let statement = datafusion::sql::parser::DFParser::parse_sql(sql)
            .unwrap()
            .pop_front()
            .unwrap();
        let config = EngineConfig {
            max_sql_depth: usize::MAX,
            ..EngineConfig::default()
        };
        measure(&statement, &config).unwrap()
    }

    #[test]
    fn the_token_estimate_follows_chains_and_brackets_not_lists() {
        assert_eq!(estimate("SELECT 1"), 0);
        assert_eq!(estimate("SELECT a+b+c"), 2);
        // Items of a list do not add up; brackets and what encloses them do.
        assert_eq!(estimate("SELECT a+b, c+d, e+f"), 1);
        assert_eq!(estimate("SELECT f(a+b, c) + 1"), 3);
        assert_eq!(estimate("SELECT ((a+b)+c)+d"), 5);
        // Set operations chain across the commas of their select lists.
        assert_eq!(
            estimate("SELECT a, b UNION ALL SELECT a, b UNION ALL SELECT a, b"),
            2
        );
        let chain = format!("SELECT {}", vec!["a"; 3000].join("+"));
        assert_eq!(estimate(&chain), 2999);
        let wide = format!("SELECT {}", vec!["a+1"; 3000].join(", "));
        assert_eq!(estimate(&wide), 1);
        // An operand's depth carries into the chain around it.
        let nested = format!("SELECT ({}) + a + a", vec!["a"; 100].join("+"));
        assert_eq!(estimate(&nested), 102);
        assert_eq!(estimate("SELECT ((a"), 2, "unclosed groups count too");
    }

    #[test]
    fn the_measured_depth_counts_expressions_queries_set_operations_and_joins() {
        let flat = shape("SELECT a, b FROM t");
        assert_eq!(flat.expressions, 2);
        let chain = shape(&format!("SELECT {} FROM t", vec!["a"; 200].join("+")));
        assert!((200..=202).contains(&chain.depth), "{chain:?}");
        let union = shape(&vec!["SELECT 1"; 100].join(" UNION ALL "));
        assert!((100..=102).contains(&union.depth), "{union:?}");
        let joins = shape(&format!(
            "SELECT 1 FROM t0 {}",
            (1..50)
                .map(|i| format!("JOIN t{i} ON true"))
                .collect::<Vec<_>>()
                .join(" ")
        ));
        assert!((49..=52).contains(&joins.depth), "{joins:?}");
        let list = shape(&format!(
            "SELECT * FROM t WHERE x IN ({})",
            (0..5000)
                .map(|i| i.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ));
        assert!(list.depth < 5, "{list:?}");
        assert!(list.expressions > 5000, "{list:?}");
    }

    #[test]
    fn a_statement_past_the_limit_is_refused_before_and_after_parsing() {
        let config = EngineConfig {
            max_sql_depth: 100,
            ..EngineConfig::default()
        };
        let chain = |n: usize| format!("SELECT {}", vec!["1"; n].join("+"));
        assert!(check_text(&chain(100), &config).is_ok());
        let e = check_text(&chain(100_000), &config).unwrap_err();
        assert!(e.to_string().contains("max_sql_depth"), "{e}");
        // Within the token estimate's slack, the parsed statement is measured exactly.
        assert!(check_text(&chain(150), &config).is_ok());
        let statement = datafusion::sql::parser::DFParser::parse_sql(&chain(150))
            .unwrap()
            .pop_front()
            .unwrap();
        let e = measure(&statement, &config).unwrap_err();
        assert!(matches!(e, Error::InvalidInput(_)), "{e}");
        assert!(e.to_string().contains("at most 100"), "{e}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn planning_off_thread_is_bounded_in_time_and_survives_panics() {
        let ok = off_thread(Duration::from_secs(5), "x", || async { Ok(7) }).await;
        assert_eq!(ok.unwrap(), 7);
        let slow = off_thread(
            Duration::from_millis(50),
            "max_planning_seconds",
            || async {
                std::thread::sleep(Duration::from_millis(500));
                Ok(())
            },
        )
        .await
        .unwrap_err();
        assert!(matches!(slow, Error::InvalidInput(_)), "{slow}");
        assert!(slow.to_string().contains("max_planning_seconds"), "{slow}");
        let panicked = off_thread(Duration::from_secs(5), "x", || async {
            if true {
                panic!("boom");
            }
            Ok(())
        })
        .await
        .unwrap_err();
        assert!(panicked.to_string().contains("boom"), "{panicked}");
        // Deep recursion fits the planning thread's stack.
        fn down(n: u32) -> u32 {
            let pad = std::hint::black_box([0u8; 1024]);
            if n == 0 {
                pad[0] as u32
            } else {
                down(n - 1) + std::hint::black_box(pad[1] as u32)
            }
        }
        let deep = off_thread(Duration::from_secs(30), "x", || async { Ok(down(100_000)) }).await;
        assert_eq!(deep.unwrap(), 0);
    }

    fn plan(sql: &str) -> LogicalPlan {
        let ctx = datafusion::prelude::SessionContext::new_with_config(
            datafusion::prelude::SessionConfig::new().with_information_schema(true),
        );
        futures::executor::block_on(async {
            ctx.sql("CREATE TABLE t (a INT) AS VALUES (1)")
                .await
                .unwrap();
            ctx.state().create_logical_plan(sql).await.unwrap()
        })
    }

    #[test]
    fn writes_and_ddl_are_refused_wherever_they_stand() {
        for sql in [
            "EXPLAIN ANALYZE COPY (SELECT 1) TO '/tmp/x.csv' STORED AS CSV",
            "EXPLAIN ANALYZE INSERT INTO t VALUES (2)",
            "EXPLAIN ANALYZE CREATE TABLE u AS SELECT 1",
            "EXPLAIN CREATE VIEW v AS SELECT 1",
            "EXPLAIN SET datafusion.execution.batch_size = 1",
        ] {
            let e = verdict(&plan(sql)).unwrap_err();
            assert!(matches!(e, Error::InvalidInput(_)), "{sql}: {e}");
        }
        let p = plan("EXPLAIN ANALYZE SELECT * FROM t WHERE a IN (SELECT a FROM t)");
        assert!(matches!(verdict(&p), Ok(Verdict::Analyze(_))));
        let p = plan("WITH x AS (SELECT a FROM t) SELECT * FROM x");
        assert!(matches!(verdict(&p), Ok(Verdict::Query(_))));
        let p =
            plan("COPY (SELECT * FROM t WHERE a IN (SELECT a FROM t)) TO '/tmp/x/' STORED AS CSV");
        assert!(matches!(verdict(&p), Ok(Verdict::Write(_))));
        let p = plan("INSERT INTO t SELECT * FROM t");
        assert!(matches!(verdict(&p), Ok(Verdict::Insert(_))));
        let p = plan("EXPLAIN INSERT INTO t VALUES (2)");
        assert!(matches!(verdict(&p), Ok(Verdict::ExplainInsert(_))));
        let p = plan("INSERT INTO t SELECT count(*) FROM information_schema.tables");
        assert!(verdict(&p).is_err());
        let p = plan("EXPLAIN COPY (SELECT * FROM t) TO '/tmp/x/' STORED AS CSV");
        assert!(matches!(verdict(&p), Ok(Verdict::ExplainWrite(_))));
        let p = plan("COPY (SELECT * FROM information_schema.tables) TO '/tmp/x/' STORED AS CSV");
        assert!(verdict(&p).is_err());
        let p = plan("SELECT * FROM information_schema.tables");
        assert!(matches!(verdict(&p), Ok(Verdict::Metadata)));
        let p = plan("SELECT (SELECT count(*) FROM information_schema.tables) FROM t");
        assert!(matches!(verdict(&p), Ok(Verdict::Metadata)));
    }
}
