//! Time travel in SQL: `t VERSION AS OF 3`, `t TIMESTAMP AS OF '2026-01-01 00:00:00'` and
//! `t FOR SYSTEM_TIME AS OF '...'` on Delta and Iceberg tables (an Iceberg table's
//! version is a snapshot id).
//!
//! DataFusion's generic dialect does not parse these clauses, and its planner ignores
//! them when another dialect does (the table would be read at its latest version: wrong
//! rows). So [`parse`] parses with [`TimeTravelDialect`] — the generic dialect that also
//! accepts them — and rewrites every versioned table reference to the name the catalog
//! resolves to that version ([`crate::delta::versioned_name`]).

use std::any::TypeId;
use std::ops::ControlFlow;

use datafusion::arrow::compute::kernels::cast_utils::string_to_timestamp_nanos;
use datafusion::sql::parser::{DFParserBuilder, Statement as DfStatement};
use datafusion::sql::sqlparser::ast::{
    Expr, Ident, ObjectNamePart, TableFactor, TableVersion, Value, VisitMut, VisitorMut,
};
use datafusion::sql::sqlparser::dialect::{Dialect, GenericDialect};

use crate::delta::{versioned_name, Version};
use crate::{Error, Result};

/// Parses one statement with [`TimeTravelDialect`], nesting at most `recursion_limit`
/// deep (DataFusion's `sql_parser.recursion_limit`), and rewrites its versioned table
/// references (see the module docs).
pub fn parse(sql: &str, recursion_limit: usize) -> Result<DfStatement> {
    // Only where the text has an `AS OF`: the clauses' keywords (`AT`, `BEFORE`,
    // `CHANGES`) would otherwise no longer be read as a table's alias (`FROM t at`).
    let words = sql
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_uppercase();
    let dialect = TimeTravelDialect {
        versions: words.contains("AS OF"),
    };
    let mut statements = DFParserBuilder::new(sql)
        .with_dialect(&dialect)
        .with_recursion_limit(recursion_limit)
        .build()
        .and_then(|mut p| p.parse_statements())
        .map_err(|e| Error::InvalidInput(with_hint(e.strip_backtrace().to_string())))?;
    if statements.len() > 1 {
        return Err(Error::InvalidInput(format!(
            "a request holds a single SQL statement, this one holds {}",
            statements.len()
        )));
    }
    let mut statement = statements.pop_front().ok_or_else(|| {
        Error::InvalidInput("No SQL statements were provided in the query string".into())
    })?;
    rewrite(&mut statement)?;
    Ok(statement)
}

/// A parse error's message, with the spelling this engine takes where the SQL used one
/// the parser does not: `CREATE TABLE ... STORED AS ICEBERG` (sqlparser's Hive formats
/// are Parquet, ORC, text, ...; table formats are named in `WITH (format = ...)`).
fn with_hint(message: String) -> String {
    let upper = message.to_ascii_uppercase();
    for format in ["ICEBERG", "DELTA"] {
        if upper.contains(&format!("EXPECTED: FILEFORMAT, FOUND: {format}")) {
            return format!(
                "{message}: a new {format} table is written with CREATE TABLE name WITH \
                 (format = '{format}') AS SELECT ... (STORED AS {format} is for CREATE \
                 EXTERNAL TABLE, which registers a table that exists)"
            );
        }
    }
    message
}

/// Renames every versioned table reference of `statement` to its versioned name.
fn rewrite(statement: &mut DfStatement) -> Result<()> {
    struct Versions(Option<Error>);
    impl VisitorMut for Versions {
        type Break = ();
        fn pre_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<()> {
            let TableFactor::Table { name, version, .. } = factor else {
                return ControlFlow::Continue(());
            };
            let Some(clause) = version.take() else {
                return ControlFlow::Continue(());
            };
            let resolved = version_of(&clause).and_then(|v| {
                let last = name.0.last_mut().and_then(|part| match part {
                    ObjectNamePart::Identifier(ident) => Some(ident),
                    _ => None,
                });
                match last {
                    Some(ident) => {
                        *ident = Ident::with_quote('"', versioned_name(&ident.value, v));
                        Ok(())
                    }
                    None => Err(Error::InvalidInput(format!(
                        "{name}: time travel needs a table name"
                    ))),
                }
            });
            match resolved {
                Ok(()) => ControlFlow::Continue(()),
                Err(e) => {
                    self.0 = Some(e);
                    ControlFlow::Break(())
                }
            }
        }
    }
    let mut visitor = Versions(None);
    match statement {
        DfStatement::Statement(s) => {
            let _ = s.visit(&mut visitor);
        }
        DfStatement::Explain(explain) => {
            if let DfStatement::Statement(s) = explain.statement.as_mut() {
                let _ = s.visit(&mut visitor);
            }
        }
        _ => {}
    }
    visitor.0.map_or(Ok(()), Err)
}

/// The version a time-travel clause names.
fn version_of(clause: &TableVersion) -> Result<Version> {
    let literal = |expr: &Expr| -> Option<String> {
        match expr {
            Expr::Value(v) => match &v.value {
                Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => Some(s.clone()),
                Value::Number(n, _) => Some(n.clone()),
                _ => None,
            },
            Expr::TypedString(t) => match &t.value.value {
                Value::SingleQuotedString(s) => Some(s.clone()),
                _ => None,
            },
            _ => None,
        }
    };
    match clause {
        TableVersion::VersionAsOf(expr) => {
            let text = literal(expr).unwrap_or_default();
            text.parse::<u64>().map(Version::At).map_err(|_| {
                Error::InvalidInput(format!(
                    "VERSION AS OF {expr}: a version is a whole number (a commit of the Delta log)"
                ))
            })
        }
        TableVersion::TimestampAsOf(expr) | TableVersion::ForSystemTimeAsOf(expr) => {
            let text = literal(expr).ok_or_else(|| {
                Error::InvalidInput(format!(
                    "TIMESTAMP AS OF {expr}: give the time as a literal, e.g. \
                     TIMESTAMP AS OF '2026-01-01 00:00:00' (UTC unless it names a zone)"
                ))
            })?;
            let nanos = string_to_timestamp_nanos(&text).map_err(|e| {
                Error::InvalidInput(format!("TIMESTAMP AS OF '{text}': not a timestamp: {e}"))
            })?;
            Ok(Version::AsOf(nanos.div_euclid(1_000_000)))
        }
        other => Err(Error::InvalidInput(format!(
            "{other} is not supported; read an earlier version of a Delta table with \
             VERSION AS OF n or TIMESTAMP AS OF '...'"
        ))),
    }
}

/// DataFusion's generic dialect, accepting `VERSION AS OF`, `TIMESTAMP AS OF` and
/// `FOR SYSTEM_TIME AS OF` after a table name. It reports itself as the generic dialect,
/// so that the parser's dialect checks treat it as one.
#[derive(Debug, Default, Clone, Copy)]
pub struct TimeTravelDialect {
    /// Whether the clauses are parsed (else exactly the generic dialect).
    pub versions: bool,
}

impl Dialect for TimeTravelDialect {
    fn dialect(&self) -> TypeId {
        TypeId::of::<GenericDialect>()
    }

    fn supports_table_versioning(&self) -> bool {
        self.versions
    }

    fn is_delimited_identifier_start(&self, ch: char) -> bool {
        GenericDialect {}.is_delimited_identifier_start(ch)
    }

    fn is_identifier_start(&self, ch: char) -> bool {
        GenericDialect {}.is_identifier_start(ch)
    }

    fn is_identifier_part(&self, ch: char) -> bool {
        GenericDialect {}.is_identifier_part(ch)
    }

    fn supports_unicode_string_literal(&self) -> bool {
        GenericDialect {}.supports_unicode_string_literal()
    }

    fn supports_partition_by_after_order_by(&self) -> bool {
        GenericDialect {}.supports_partition_by_after_order_by()
    }

    fn supports_array_join_syntax(&self) -> bool {
        GenericDialect {}.supports_array_join_syntax()
    }

    fn supports_group_by_expr(&self) -> bool {
        GenericDialect {}.supports_group_by_expr()
    }

    fn supports_group_by_with_modifier(&self) -> bool {
        GenericDialect {}.supports_group_by_with_modifier()
    }

    fn supports_left_associative_joins_without_parens(&self) -> bool {
        GenericDialect {}.supports_left_associative_joins_without_parens()
    }

    fn supports_connect_by(&self) -> bool {
        GenericDialect {}.supports_connect_by()
    }

    fn supports_match_recognize(&self) -> bool {
        GenericDialect {}.supports_match_recognize()
    }

    fn supports_pipe_operator(&self) -> bool {
        GenericDialect {}.supports_pipe_operator()
    }

    fn supports_start_transaction_modifier(&self) -> bool {
        GenericDialect {}.supports_start_transaction_modifier()
    }

    fn supports_window_function_null_treatment_arg(&self) -> bool {
        GenericDialect {}.supports_window_function_null_treatment_arg()
    }

    fn supports_dictionary_syntax(&self) -> bool {
        GenericDialect {}.supports_dictionary_syntax()
    }

    fn supports_window_clause_named_window_reference(&self) -> bool {
        GenericDialect {}.supports_window_clause_named_window_reference()
    }

    fn supports_parenthesized_set_variables(&self) -> bool {
        GenericDialect {}.supports_parenthesized_set_variables()
    }

    fn supports_select_wildcard_except(&self) -> bool {
        GenericDialect {}.supports_select_wildcard_except()
    }

    fn support_map_literal_syntax(&self) -> bool {
        GenericDialect {}.support_map_literal_syntax()
    }

    fn allow_extract_custom(&self) -> bool {
        GenericDialect {}.allow_extract_custom()
    }

    fn allow_extract_single_quotes(&self) -> bool {
        GenericDialect {}.allow_extract_single_quotes()
    }

    fn supports_extract_comma_syntax(&self) -> bool {
        GenericDialect {}.supports_extract_comma_syntax()
    }

    fn supports_create_view_comment_syntax(&self) -> bool {
        GenericDialect {}.supports_create_view_comment_syntax()
    }

    fn supports_parens_around_table_factor(&self) -> bool {
        GenericDialect {}.supports_parens_around_table_factor()
    }

    fn supports_values_as_table_factor(&self) -> bool {
        GenericDialect {}.supports_values_as_table_factor()
    }

    fn supports_create_index_with_clause(&self) -> bool {
        GenericDialect {}.supports_create_index_with_clause()
    }

    fn supports_explain_with_utility_options(&self) -> bool {
        GenericDialect {}.supports_explain_with_utility_options()
    }

    fn supports_limit_comma(&self) -> bool {
        GenericDialect {}.supports_limit_comma()
    }

    fn supports_update_order_by(&self) -> bool {
        GenericDialect {}.supports_update_order_by()
    }

    fn supports_from_first_select(&self) -> bool {
        GenericDialect {}.supports_from_first_select()
    }

    fn supports_projection_trailing_commas(&self) -> bool {
        GenericDialect {}.supports_projection_trailing_commas()
    }

    fn supports_asc_desc_in_column_definition(&self) -> bool {
        GenericDialect {}.supports_asc_desc_in_column_definition()
    }

    fn supports_try_convert(&self) -> bool {
        GenericDialect {}.supports_try_convert()
    }

    fn supports_bitwise_shift_operators(&self) -> bool {
        GenericDialect {}.supports_bitwise_shift_operators()
    }

    fn supports_comment_on(&self) -> bool {
        GenericDialect {}.supports_comment_on()
    }

    fn supports_load_extension(&self) -> bool {
        GenericDialect {}.supports_load_extension()
    }

    fn supports_named_fn_args_with_assignment_operator(&self) -> bool {
        GenericDialect {}.supports_named_fn_args_with_assignment_operator()
    }

    fn supports_struct_literal(&self) -> bool {
        GenericDialect {}.supports_struct_literal()
    }

    fn supports_empty_projections(&self) -> bool {
        GenericDialect {}.supports_empty_projections()
    }

    fn supports_nested_comments(&self) -> bool {
        GenericDialect {}.supports_nested_comments()
    }

    fn supports_multiline_comment_hints(&self) -> bool {
        GenericDialect {}.supports_multiline_comment_hints()
    }

    fn supports_user_host_grantee(&self) -> bool {
        GenericDialect {}.supports_user_host_grantee()
    }

    fn supports_string_escape_constant(&self) -> bool {
        GenericDialect {}.supports_string_escape_constant()
    }

    fn supports_array_typedef_with_brackets(&self) -> bool {
        GenericDialect {}.supports_array_typedef_with_brackets()
    }

    fn supports_match_against(&self) -> bool {
        GenericDialect {}.supports_match_against()
    }

    fn supports_set_names(&self) -> bool {
        GenericDialect {}.supports_set_names()
    }

    fn supports_comma_separated_set_assignments(&self) -> bool {
        GenericDialect {}.supports_comma_separated_set_assignments()
    }

    fn supports_filter_during_aggregation(&self) -> bool {
        GenericDialect {}.supports_filter_during_aggregation()
    }

    fn supports_select_wildcard_exclude(&self) -> bool {
        GenericDialect {}.supports_select_wildcard_exclude()
    }

    fn supports_data_type_signed_suffix(&self) -> bool {
        GenericDialect {}.supports_data_type_signed_suffix()
    }

    fn supports_interval_options(&self) -> bool {
        GenericDialect {}.supports_interval_options()
    }

    fn supports_quote_delimited_string(&self) -> bool {
        GenericDialect {}.supports_quote_delimited_string()
    }

    fn supports_select_wildcard_replace(&self) -> bool {
        GenericDialect {}.supports_select_wildcard_replace()
    }

    fn supports_select_wildcard_ilike(&self) -> bool {
        GenericDialect {}.supports_select_wildcard_ilike()
    }

    fn supports_select_wildcard_rename(&self) -> bool {
        GenericDialect {}.supports_select_wildcard_rename()
    }

    fn supports_optimize_table(&self) -> bool {
        GenericDialect {}.supports_optimize_table()
    }

    fn supports_install(&self) -> bool {
        GenericDialect {}.supports_install()
    }

    fn supports_detach(&self) -> bool {
        GenericDialect {}.supports_detach()
    }

    fn supports_prewhere(&self) -> bool {
        GenericDialect {}.supports_prewhere()
    }

    fn supports_with_fill(&self) -> bool {
        GenericDialect {}.supports_with_fill()
    }

    fn supports_limit_by(&self) -> bool {
        GenericDialect {}.supports_limit_by()
    }

    fn supports_interpolate(&self) -> bool {
        GenericDialect {}.supports_interpolate()
    }

    fn supports_settings(&self) -> bool {
        GenericDialect {}.supports_settings()
    }

    fn supports_select_format(&self) -> bool {
        GenericDialect {}.supports_select_format()
    }

    fn supports_comment_optimizer_hint(&self) -> bool {
        GenericDialect {}.supports_comment_optimizer_hint()
    }

    fn supports_constraint_keyword_without_name(&self) -> bool {
        GenericDialect {}.supports_constraint_keyword_without_name()
    }

    fn supports_key_column_option(&self) -> bool {
        GenericDialect {}.supports_key_column_option()
    }

    fn supports_comma_separated_trim(&self) -> bool {
        GenericDialect {}.supports_comma_separated_trim()
    }

    fn supports_cte_without_as(&self) -> bool {
        GenericDialect {}.supports_cte_without_as()
    }

    fn supports_select_item_multi_column_alias(&self) -> bool {
        GenericDialect {}.supports_select_item_multi_column_alias()
    }

    fn supports_xml_expressions(&self) -> bool {
        GenericDialect {}.supports_xml_expressions()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(sql: &str) -> Result<DfStatement> {
        super::parse(sql, 50)
    }

    fn rewritten(sql: &str) -> String {
        parse(sql).unwrap().to_string()
    }

    #[test]
    fn versioned_references_become_versioned_names() {
        assert_eq!(
            rewritten("SELECT * FROM t VERSION AS OF 3 JOIN u ON t.a = u.a"),
            "SELECT * FROM \"t@v3\" JOIN u ON t.a = u.a"
        );
        assert_eq!(
            rewritten("SELECT * FROM s.t TIMESTAMP AS OF '2026-01-01 00:00:01' AS x"),
            "SELECT * FROM s.\"t@t1767225601000\" AS x"
        );
        assert_eq!(
            rewritten("SELECT (SELECT max(a) FROM t FOR SYSTEM_TIME AS OF '1970-01-01T00:00:01Z')"),
            "SELECT (SELECT max(a) FROM \"t@t1000\")"
        );
        // Inside EXPLAIN and a CTE alike.
        assert_eq!(
            rewritten("EXPLAIN WITH x AS (SELECT * FROM t VERSION AS OF 1) SELECT * FROM x"),
            "EXPLAIN WITH x AS (SELECT * FROM \"t@v1\") SELECT * FROM x"
        );
        // Without a clause nothing changes, aliases named like keywords included.
        assert_eq!(
            rewritten("SELECT * FROM t AS version"),
            "SELECT * FROM t AS version"
        );
    }

    #[test]
    fn bad_versions_are_refused_by_name() {
        let deep = format!("SELECT {}1{}", "(".repeat(60), ")".repeat(60));
        for (sql, why) in [
            (
                "SELECT * FROM t TIMESTAMP AS OF now()",
                "give the time as a literal",
            ),
            (
                "SELECT * FROM t TIMESTAMP AS OF 'yesterday'",
                "not a timestamp",
            ),
            ("SELECT 1; SELECT 2", "a single SQL statement"),
            ("", "No SQL statements"),
            (deep.as_str(), "RecursionLimitExceeded"),
        ] {
            let err = parse(sql).unwrap_err().to_string();
            assert!(err.contains(why), "{sql}: {err}");
        }
    }
}
